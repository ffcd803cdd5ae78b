"""``pacer settle``: wait until memory has settled after a previous pacer died.

A proving daemon that dies leaves hundreds of GiB of pinned host memory that the kernel takes
minutes to give back. Run as systemd ``ExecStartPre=``, this command samples used memory (the
memory.current of the cgroup whose memory.max limits it, where one does; the host's MemTotal −
MemAvailable otherwise) until it is back at the baseline or has stopped changing, no
process of the old instance is left, alive or zombie, and no process that outlived it still
maps its pool's shared-memory blocks.

The decision logic (``SettleDetector``, ``settle``) is pure and runs on any timed series: the
real sampler on the monotonic clock (``run``) or a recorded CSV on virtual time (``replay``).
"""

from __future__ import annotations

from pacer.settle.cli import (
    DESCRIPTION as DESCRIPTION,
)
from pacer.settle.cli import (
    EPILOG as EPILOG,
)
from pacer.settle.cli import (
    HELP as HELP,
)
from pacer.settle.cli import (
    _options as _options,
)
from pacer.settle.cli import (
    _run_host as _run_host,
)
from pacer.settle.cli import (
    _seconds as _seconds,
)
from pacer.settle.cli import (
    _size as _size,
)
from pacer.settle.cli import (
    _unsettled as _unsettled,
)
from pacer.settle.cli import (
    _warn as _warn,
)
from pacer.settle.cli import (
    add_arguments as add_arguments,
)
from pacer.settle.cli import (
    main as main,
)
from pacer.settle.cli import (
    summary as summary,
)
from pacer.settle.detector import (
    _BYTE_SIZE as _BYTE_SIZE,
)
from pacer.settle.detector import (
    COMM_LEN as COMM_LEN,
)
from pacer.settle.detector import (
    DEFAULT_INTERVAL_S as DEFAULT_INTERVAL_S,
)
from pacer.settle.detector import (
    DEFAULT_PROCESS_NAME as DEFAULT_PROCESS_NAME,
)
from pacer.settle.detector import (
    DEFAULT_STATE_FILE as DEFAULT_STATE_FILE,
)
from pacer.settle.detector import (
    DEFAULT_TIMEOUT_S as DEFAULT_TIMEOUT_S,
)
from pacer.settle.detector import (
    DEFAULT_TOLERANCE as DEFAULT_TOLERANCE,
)
from pacer.settle.detector import (
    DEFAULT_WINDOW_S as DEFAULT_WINDOW_S,
)
from pacer.settle.detector import (
    GIB as GIB,
)
from pacer.settle.detector import (
    PROGRESS_EVERY_S as PROGRESS_EVERY_S,
)
from pacer.settle.detector import (
    SIZE_RULE as SIZE_RULE,
)
from pacer.settle.detector import (
    Reason as Reason,
)
from pacer.settle.detector import (
    SettleDetector as SettleDetector,
)
from pacer.settle.detector import (
    Trend as Trend,
)
from pacer.settle.detector import (
    Verdict as Verdict,
)
from pacer.settle.detector import (
    gib as gib,
)
from pacer.settle.detector import (
    parse_size as parse_size,
)
from pacer.settle.held import (
    BlockHolder as BlockHolder,
)
from pacer.settle.held import (
    Held as Held,
)
from pacer.settle.held import (
    HeldBlockScanner as HeldBlockScanner,
)
from pacer.settle.held import (
    ReportedHolders as ReportedHolders,
)
from pacer.settle.loop import (
    Result as Result,
)
from pacer.settle.loop import (
    SettleOptions as SettleOptions,
)
from pacer.settle.loop import (
    _sample_every as _sample_every,
)
from pacer.settle.loop import (
    replay as replay,
)
from pacer.settle.loop import (
    run as run,
)
from pacer.settle.loop import (
    settle as settle,
)
from pacer.settle.scope import (
    SCOPES as SCOPES,
)
from pacer.settle.scope import (
    Scope as Scope,
)
from pacer.settle.scope import (
    resolve_scope as resolve_scope,
)
from pacer.settle.sources import (
    STATES as STATES,
)
from pacer.settle.sources import (
    CgroupSampler as CgroupSampler,
)
from pacer.settle.sources import (
    MeminfoSampler as MeminfoSampler,
)
from pacer.settle.sources import (
    NvmlMemory as NvmlMemory,
)
from pacer.settle.sources import (
    ProcessCheck as ProcessCheck,
)
from pacer.settle.sources import (
    ProcessInfo as ProcessInfo,
)
from pacer.settle.sources import (
    ProcessScanner as ProcessScanner,
)
from pacer.settle.sources import (
    ReplayError as ReplayError,
)
from pacer.settle.sources import (
    Sample as Sample,
)
from pacer.settle.sources import (
    Sampler as Sampler,
)
from pacer.settle.sources import (
    SamplingError as SamplingError,
)
from pacer.settle.sources import (
    TimedSample as TimedSample,
)
from pacer.settle.sources import (
    _parse_replay as _parse_replay,
)
from pacer.settle.sources import (
    _read_stat as _read_stat,
)
from pacer.settle.sources import (
    no_processes as no_processes,
)
from pacer.settle.sources import (
    read_replay as read_replay,
)
from pacer.settle.sources import (
    used_bytes_from_meminfo as used_bytes_from_meminfo,
)
from pacer.settle.state import (
    Remembered as Remembered,
)
from pacer.settle.state import (
    default_state_file as default_state_file,
)
from pacer.settle.state import (
    load_state as load_state,
)
from pacer.settle.state import (
    record_state as record_state,
)
