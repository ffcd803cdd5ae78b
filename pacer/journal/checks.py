"""What every journal checks before it writes, whatever stores it: a new job's fields, a keyed
request and its digest, a partition index, an error's text; and the error a job fails with
after its attempts."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pacer.journal.records import MAX_IDEMPOTENCY_KEY, MAX_PARTITIONS, JobRecord, is_int


def checked_params_json(
    partitions: int, workload: str | None, params: dict[str, Any], priority: int
) -> str:
    """Check a new job's fields; its params as JSON."""
    if not is_int(partitions) or not 1 <= partitions <= MAX_PARTITIONS:
        raise ValueError(
            f"partitions must be an integer from 1 to {MAX_PARTITIONS}, got {partitions!r}"
        )
    if workload is not None and (not isinstance(workload, str) or not workload):
        raise ValueError(f"workload must be a non-empty string or None, got {workload!r}")
    if not is_int(priority) or not -(2**63) <= priority < 2**63:
        raise ValueError(f"priority must be a 64-bit integer, got {priority!r}")
    if not isinstance(params, dict) or not all(isinstance(k, str) for k in params):
        raise ValueError(f"params must be a dict with string keys, got {params!r}")
    try:
        return json.dumps(params, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise ValueError(f"params must be JSON-serializable with finite numbers: {e}") from e


def keyed_request(
    key: str, partitions: int, workload: str | None, params: dict[str, Any], priority: int
) -> tuple[str, str]:
    """Check a keyed job request; its params as JSON and the request's digest (SHA-256 of its
    canonical form: the same request, the same digest)."""
    if not isinstance(key, str) or not 1 <= len(key) <= MAX_IDEMPOTENCY_KEY:
        raise ValueError(
            f"idempotency key must be a string of 1 to {MAX_IDEMPOTENCY_KEY} characters, "
            f"got {key!r:.80}"
        )
    params_json = checked_params_json(partitions, workload, params, priority)
    canonical = json.dumps([partitions, workload, json.loads(params_json), priority],
                           sort_keys=True, separators=(",", ":"))  # fmt: skip
    return params_json, hashlib.sha256(canonical.encode()).hexdigest()


def check_index(job: JobRecord, index: int) -> None:
    """``ValueError`` unless ``index`` names one of the job's partitions."""
    if not is_int(index) or not 0 <= index < job.partitions:
        raise ValueError(
            f"index must be from 0 to {job.partitions - 1} for job {job.id}, got {index!r}"
        )


def check_text(name: str, value: str) -> None:
    """``ValueError`` naming ``name`` unless ``value`` is a non-empty string (an error, a
    reason)."""
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name} must be a non-empty string, got {value!r}")


def check_limit(name: str, value: int) -> None:
    """``ValueError`` naming ``name`` unless ``value`` is an integer >= 1."""
    if not is_int(value) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")


def exhausted(index: int, attempts: int, reason: str) -> str:
    """A failed job's error: which partition, after how many attempts, and the last reason."""
    plural = "attempt" if attempts == 1 else "attempts"
    return f"partition {index} failed after {attempts} {plural}: {reason}"
