"""The environment variables of the settings: their names, defaults and descriptions, the
values a Settings object holds for them (``pacer config``), and the table of them in
docs/settings.md (``pacer config --markdown``)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from pydantic import BaseModel, ByteSize, SecretStr

from pacer.config.settings import ENV_NESTED_DELIMITER, ENV_PREFIX, Settings

SECRET_MASK = "**********"  # what `pacer config` shows of a secret that is set
HOST_DEPENDENT = "(host-dependent)"  # the default of a setting derived from the host


def env_name(loc: tuple[int | str, ...]) -> str:
    """The variable of a field path: ``("controller", "kp")`` → ``PACER_CONTROLLER__KP``."""
    return ENV_PREFIX + ENV_NESTED_DELIMITER.join(str(part).upper() for part in loc)


@dataclass(frozen=True)
class Variable:
    """One environment variable of the schema: its name, default and description."""

    name: str
    default: str
    description: str


def section_model(name: str) -> type[BaseModel] | None:
    """The section model of the Settings field ``name``; None for a top-level setting."""
    model = Settings.model_fields[name].annotation
    if isinstance(model, type) and issubclass(model, BaseModel):
        return model
    return None


def variables() -> Iterator[Variable]:
    """Every environment variable the Settings schema reads, in declaration order."""
    for name, top in Settings.model_fields.items():
        section = section_model(name)
        fields = [((name,), top)] if section is None else [
            ((name, field_name), field) for field_name, field in section.model_fields.items()
        ]  # fmt: skip
        for loc, field in fields:
            if field.default_factory is not None:
                default = HOST_DEPENDENT
            else:
                default = _render(field.default)
            yield Variable(env_name(loc), default, field.description or "")


def _render(value: object) -> str:
    if isinstance(value, ByteSize):
        return str(int(value))
    if isinstance(value, SecretStr):
        return SECRET_MASK
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def effective(settings: Settings) -> list[tuple[Variable, str]]:
    """Each variable with the value ``settings`` holds for it (secrets masked)."""
    out = []
    for var in variables():
        value: object = settings
        for part in var.name.removeprefix(ENV_PREFIX).lower().split(ENV_NESTED_DELIMITER):
            value = getattr(value, part)
        out.append((var, _render(value)))
    return out


def is_set(settings: Settings, name: str) -> bool:
    """Whether ``settings`` were given variable ``name`` (from the environment or as an
    argument), rather than taking its default.

    >>> is_set(Settings(controller={"kp": 0.4}), "PACER_CONTROLLER__KP")
    True
    >>> is_set(Settings(controller={"kp": 0.4}), "PACER_CONTROLLER__KI")
    False
    """
    owner: BaseModel = settings
    *sections, field = name.removeprefix(ENV_PREFIX).lower().split(ENV_NESTED_DELIMITER)
    for part in sections:
        if part not in owner.model_fields_set:
            return False
        owner = getattr(owner, part)
    return field in owner.model_fields_set


def markdown_table() -> str:
    """The table of environment variables in docs/settings.md, generated from the schema."""
    lines = ["| Variable | Default | Meaning (unit) |", "|---|---|---|"]
    for var in variables():
        lines.append(f"| `{var.name}` | `{var.default}` | {var.description} |")
    return "\n".join(lines)
