"""Settings: every tunable of pacer, read from ``PACER_*`` environment variables.

Nested sections use ``__``: ``PACER_CONTROLLER__KP=0.4`` sets ``Settings().controller.kp``.
Sizes accept bytes or a unit (``PACER_MEMORY__BUDGET_BYTES=700GiB``). Building a Settings object
reads the environment and nothing else: no logging set-up, no files written.

The sections are declared by what they set: `control` (the dispatch policy), `host` (cores,
memory, GPUs, the built-in workload) and `operation` (API, journal, shutdown, time limits,
retries, health) and `journal` (the SQLite file or the fleet's PostgreSQL database);
`settings` puts them together. `load` builds Settings from the environment
with each problem named by its variable; `env` lists the variables and renders them.
"""

from pacer.config.control import ControllerSettings
from pacer.config.env import Variable, effective, env_name, is_set, markdown_table, variables
from pacer.config.journal import JournalSettings, redacted
from pacer.config.load import SettingsError, load_settings
from pacer.config.machine import GpuSettings, MemorySettings, NttSettings, SynthesisSettings
from pacer.config.operation import (
    MAX_TOKEN_CHARS,
    MIN_TOKEN_CHARS,
    ApiSettings,
    HealthSettings,
    RetrySettings,
    ShutdownSettings,
    TimeoutSettings,
)
from pacer.config.settings import ENV_NESTED_DELIMITER, ENV_PREFIX, Settings

__all__ = [
    "ENV_NESTED_DELIMITER",
    "ENV_PREFIX",
    "MAX_TOKEN_CHARS",
    "MIN_TOKEN_CHARS",
    "ApiSettings",
    "ControllerSettings",
    "GpuSettings",
    "HealthSettings",
    "JournalSettings",
    "MemorySettings",
    "NttSettings",
    "RetrySettings",
    "Settings",
    "SettingsError",
    "ShutdownSettings",
    "SynthesisSettings",
    "TimeoutSettings",
    "Variable",
    "effective",
    "env_name",
    "is_set",
    "load_settings",
    "markdown_table",
    "redacted",
    "variables",
]
