"""The OpenAPI 3.1 document of the API, generated from its route table (`pacer.api.routes`).

Schemas of what the journal records (a job, a partition, a failed attempt) and of the
controller's settings are generated from their dataclasses and pydantic model, so that they
follow them; the ISO 8601 twins of their times are added beside each.
"""

from __future__ import annotations

import typing
from collections.abc import Iterable
from dataclasses import fields
from typing import Any

from pydantic import TypeAdapter

from pacer import __version__
from pacer.api.routes import ROUTES, Answer, Route
from pacer.config import ControllerSettings
from pacer.control.estimates import Estimates
from pacer.control.policy import Mode, Terms
from pacer.journal import MAX_PARTITIONS, JobRecord, JobState, PartitionRecord
from pacer.metrics.fleet import FleetCounts

Schema = dict[str, Any]
REF = "#/components/schemas/{model}"
STRING = {"type": "string"}
NULLABLE_STRING = {"type": ["string", "null"]}
INTEGER = {"type": "integer"}
NULLABLE_INTEGER = {"type": ["integer", "null"]}
OBJECT = {"type": "object"}


def ref(name: str) -> Schema:
    return {"$ref": REF.format(model=name)}


def _generated(kind: Any, into: dict[str, Schema], name: str | None = None) -> Schema:
    """``kind``'s JSON schema (pydantic's), its definitions added to ``into``."""
    schema: Schema = TypeAdapter(kind).json_schema(ref_template=REF)
    into.update(schema.pop("$defs", {}))
    into[name or schema.get("title", kind.__name__)] = schema
    return schema


def _with_iso(schema: Schema, *names: str) -> None:
    """Beside each time ``name`` (epoch seconds), ``name_iso``: the same instant as ISO 8601
    in UTC (null where the time is)."""
    for name in names:
        nullable = "anyOf" in schema["properties"][name]
        schema["properties"][f"{name}_iso"] = {
            "type": ["string", "null"] if nullable else "string",
            "format": "date-time",
            "description": f"{name} as ISO 8601 in UTC, to the millisecond",
        }
        if name in schema.get("required", []):
            schema["required"].append(f"{name}_iso")


def _terms() -> Schema:
    """The PI controller's terms, as `Terms._asdict()` gives them (a number that is not
    finite, such as the synthesis cap before a synthesis time is known, is null)."""
    kinds = {float: {"type": ["number", "null"]}, int: INTEGER,
             Mode: {"type": "string", "enum": [m.value for m in Mode]}}  # fmt: skip
    fields = typing.get_type_hints(Terms)
    return {"type": "object", "properties": {n: kinds[t] for n, t in fields.items()},
            "required": list(Terms._fields)}  # fmt: skip


def schemas() -> dict[str, Schema]:
    """Every schema the document's routes name."""
    out: dict[str, Schema] = {}
    _with_iso(_generated(JobRecord, out, "Job"), "created_at", "updated_at")
    partition = _generated(PartitionRecord, out, "Partition")
    del partition["properties"]["job_id"]
    partition["required"].remove("job_id")
    partition["properties"]["attempts"]["items"] = ref("Attempt")
    _with_iso(partition, "completed_at")
    _with_iso(out["Attempt"], "at")
    out["PartitionState"]["description"] = "A partition without a result is pending."
    _generated(Estimates, out)
    settings = _generated(ControllerSettings, out)
    patch = {k: v for k, v in settings["properties"].items() if k != "policy"}
    patch["manual_interval_s"] = {
        "anyOf": [{"type": "number", "exclusiveMinimum": 0}, {"type": "null"}],
        "description": "Fix the interval between dispatches (s); null hands back to PI",
    }
    job_state = ref("JobState")
    page_end = {"partitions_next_offset": NULLABLE_INTEGER,
                "partitions_next_cursor": NULLABLE_STRING}  # fmt: skip
    out |= {
        "Error": {"type": "object", "required": ["error"], "properties": {
            "error": STRING, "field": {**STRING, "description": "The field at fault"}}},
        "CancelConflict": {"allOf": [ref("Error"), {"type": "object", "required": ["state"],
                           "properties": {"state": job_state}}]},
        "Alive": {"type": "object", "required": ["status"], "properties": {"status": STRING}},
        "Ready": {"type": "object", "required": ["status"], "properties": {"status": STRING}},
        "NotReady": {"type": "object", "required": ["error", "reasons"], "properties": {
            "error": STRING, "reasons": {"type": "array", "items": STRING}}},
        "OpenApi": {"type": "object", "required": ["openapi", "info", "paths"]},
        "JobRequest": {"type": "object", "required": ["partitions"],
                       "additionalProperties": False, "properties": {
            "partitions": {"type": "integer", "minimum": 1, "maximum": MAX_PARTITIONS},
            "workload": {**STRING, "description": "The service's workload (the default)"},
            "params": {**OBJECT, "description": "The workload's parameters"},
            "priority": {"type": "integer", "minimum": -1000, "maximum": 1000, "default": 0}}},
        "Accepted": {"type": "object", "required": ["id", "state"], "properties": {
            "id": STRING, "state": job_state, "replayed": {"type": "boolean"}}},
        "JobPage": {"type": "object", "required": ["jobs", "next_cursor"], "properties": {
            "jobs": {"type": "array", "items": ref("Job")}, "next_cursor": NULLABLE_STRING}},
        "PartitionSummary": {"type": "object", "properties": {
            "pending": INTEGER, "completed": INTEGER, "failed": INTEGER,
            "first_failures": {"type": "array", "items": {"type": "object", "properties": {
                "index": INTEGER, "error": STRING}}}}},
        "Holder": {"type": "object", "required": ["host", "leases", "partitions"], "properties": {
            "host": STRING, "leases": INTEGER, "partitions": INTEGER,
            "runs": {"type": "array", "items": {"type": "array", "items": INTEGER}},
            "expires_in_s": {"type": "number", "description": "The soonest of its leases "
                             "lapses in (s, the database's clock; <= 0: lapsed)"}}},
        "JobDetail": {"allOf": [ref("Job"), {
            "type": "object", "required": ["partition_results", *page_end], "properties": {
                "partitions_summary": ref("PartitionSummary"),
                "last_failures": {"type": "array", "items": ref("Attempt")},
                "partition_results": {"type": "array", "items": ref("Partition")},
                "holders": {"type": "array", "items": ref("Holder"), "description": "With a "
                            "fleet's journal: the hosts holding leases of its partitions"},
                **page_end}}]},
        "PartitionPage": {
            "type": "object", "required": ["id", "partition_results", "next_cursor"],
            "properties": {"id": STRING, "partitions": INTEGER, "offset": INTEGER,
                           "limit": INTEGER, "next_offset": NULLABLE_INTEGER,
                           "next_cursor": NULLABLE_STRING,
                           "partition_results": {"type": "array", "items": ref("Partition")}}},
        "Terms": _terms(),
        "Controller": {
            "type": "object", "required": ["policy", "mode", "interval_s", "bootstraps"],
            "properties": {"policy": settings["properties"]["policy"],
                           "mode": {"type": "string", "enum": [m.value for m in Mode]},
                           "interval_s": {"type": ["number", "null"]}, "bootstraps": INTEGER,
                           "rebootstraps": INTEGER, "settings": ref("ControllerSettings"),
                           "terms": ref("Terms"), "estimates": ref("Estimates"),
                           "synthesis_supply_per_s": {
                               "type": ["number", "null"],
                               "description": "Partitions a second the synthesis slots finish "
                               "with every one busy, without the wait for one; null until a "
                               "synthesis time is known"},
                           "synthesis_queue": {
                               "type": "integer", "minimum": 0,
                               "description": "Partitions allowed to wait in front of the "
                               "synthesis processes: the hand-off's and the bunched ends'"},
                           "synthesis_handoff_s": {
                               "type": ["number", "null"],
                               "description": "The measured trip from a dispatch to a free "
                               "synthesis thread and from a synthesis's end back to the "
                               "service (s); null until measured"}}},
        "ControllerPatch": {"type": "object", "additionalProperties": False,
                            "properties": patch},
        "Status": {"type": "object", "required": list(STATUS), "properties": {
            **STATUS, "fleet": ref("FleetStatus")}},
        "FleetStatus": {"type": "object", "required": list(FLEET), "properties": FLEET,
                        "description": "With a fleet's journal: this host's claims and leases, "
                        "the fleet's partitions left and the hosts holding leases"},
    }  # fmt: skip
    return out


STATUS: dict[str, Schema] = {
    "ready": {"type": "boolean"},
    "draining": {"type": "boolean"},
    "reasons": {"type": "array", "items": STRING},
    "health": OBJECT,
    "workload": STRING,
    "controller": ref("Controller"),
    "queues": {"type": "object", "additionalProperties": INTEGER},
    "memory": OBJECT,
    "pool": OBJECT,
    "startup": OBJECT,
    "calls": OBJECT,
    "retry": OBJECT,
    "synthesis": OBJECT,
    "gpus": {"type": "array", "items": OBJECT},
    "jobs": {
        "type": ["object", "null"],
        "properties": {s.value: INTEGER for s in JobState},
        "description": "null while a journal call hangs",
    },
    "journal": OBJECT,
    "engines": {
        "type": "array",
        "items": OBJECT,
        "description": "Each engine session: its controller, partitions and bytes in "
        "flight, events and errors (docs/engine-protocol.md)",
    },
}


FLEET: dict[str, Schema] = {
    "host": STRING,
    "lease_s": {"type": "number"},
    "claim_max": INTEGER,
    "claim_target": INTEGER,
    "leases": INTEGER,
    "leased_partitions": INTEGER,
    "since_renewal_s": {"type": "number"},
    **{counter.name: INTEGER for counter in fields(FleetCounts)},
    "pending_partitions": NULLABLE_INTEGER,  # these two: null while a journal call hangs
    "hosts": {"type": ["array", "null"], "items": ref("Holder")},
}  # fmt: skip


def _answer(answer: Answer) -> Schema:
    if answer.schema is None:
        content = {answer.media: {"schema": STRING}}
        return {"description": answer.description, "content": content}
    content = {"application/json": {"schema": ref(answer.schema)}}
    return {"description": answer.description, "content": content}


def _operation(route: Route) -> Schema:
    operation: Schema = {
        "operationId": route.operation_id,
        "summary": route.summary,
        "responses": {str(status): _answer(a) for status, a in sorted(route.answers.items())},
    }
    if route.params:
        operation["parameters"] = [
            {"name": p.name, "in": p.where, "description": p.description,
             "required": p.required, "schema": p.schema}
            for p in route.params
        ]  # fmt: skip
    if route.body is not None:
        json_body = {"application/json": {"schema": ref(route.body)}}
        operation["requestBody"] = {"required": True, "content": json_body}
    if route.writes:
        operation["security"] = [{"bearer": []}]
    return operation


def document(routes: Iterable[Route] = ROUTES) -> Schema:
    """The OpenAPI 3.1 document of ``routes``."""
    paths: dict[str, Schema] = {}
    for route in routes:
        paths.setdefault(route.path, {})[route.method.lower()] = _operation(route)
    bearer = {
        "type": "http",
        "scheme": "bearer",
        "description": "PACER_API__TOKEN; required by the routes that change state, and only "
        "where it is set",
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "pacer",
            "version": __version__,
            "description": "Pacing CPU synthesis and GPU proving: jobs, status, controller.",
        },
        "paths": paths,
        "components": {"schemas": schemas(), "securitySchemes": {"bearer": bearer}},
    }
