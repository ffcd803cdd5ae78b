"""Settings built from the environment, with each problem named by its variable and rule."""

from __future__ import annotations

import os
import re
from collections.abc import Collection
from typing import Any

from pydantic import ValidationError

from pacer.config.env import env_name, section_model, variables
from pacer.config.settings import ENV_PREFIX, Settings

RENAMED = {"PACER_NTT__KERNEL": "PACER_NTT__CPU_BACKEND"}
"""Variables that were renamed, by their old name: set in the environment, each is refused with
its new name, so a unit file written for an older pacer does not quietly lose the setting."""


class SettingsError(Exception):
    """Settings could not be built; ``problems`` holds one line per bad variable."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


def load_settings(reads: Collection[str] | None = None) -> Settings:
    """Build Settings from the environment.

    ``reads``: the settings a command reads, by field of Settings (a section such as
    ``"controller"``, or ``"workload"``); None: all of them (the service). A bad value
    elsewhere is not that command's to refuse: the setting it is in keeps its default.

    Raises SettingsError naming each offending variable and the rule it breaks, including
    ``PACER_*`` variables that match no setting (a typo would otherwise be ignored silently).
    """
    known = {v.name for v in variables()} | {env_name((name,)) for name in Settings.model_fields}
    unknown = sorted(key for key in os.environ if key.startswith(ENV_PREFIX) and key not in known)
    if unknown:
        raise SettingsError([
            f"{key}: renamed {RENAMED[key]}; set that instead"
            if key in RENAMED
            else f"{key}: not a pacer setting (see `pacer config`)"
            for key in unknown
        ])  # fmt: skip
    try:
        return Settings()
    except ValidationError as exc:
        errors = exc.errors()
    read = set(Settings.model_fields if reads is None else reads)
    mine = [err for err in errors if not err["loc"] or str(err["loc"][0]) in read]
    if mine:
        raise SettingsError([_describe(err) for err in mine])
    # Arguments win over the environment: each unread setting in error takes its default.
    defaults = {name: Settings.model_fields[name].get_default(call_default_factory=True)
                for name in {str(err["loc"][0]) for err in errors}}  # fmt: skip
    return Settings(**defaults)


def _describe(err: Any) -> str:
    loc = tuple(err["loc"])
    value = err.get("input")
    message = str(err["msg"]).removeprefix("Value error, ")
    if isinstance(value, dict):
        # A rule across fields of one section: name each field by its variable.
        section = section_model(str(loc[0]))
        fields = section.model_fields if section is not None else {}
        for field in sorted(fields, key=len, reverse=True):
            message = re.sub(rf"\b{re.escape(field)}\b", env_name((*loc, field)), message)
        return message
    if _is_secret(loc):
        return f"{env_name(loc)}: {message}"  # never echo a secret
    return f"{env_name(loc)}: {message} (got {value!r})"


def _is_secret(loc: tuple[int | str, ...]) -> bool:
    section = section_model(str(loc[0])) if len(loc) == 2 else None
    field = section.model_fields.get(str(loc[1])) if section is not None else None
    return field is not None and "SecretStr" in str(field.annotation)
