"""systemd's reading of an EnvironmentFile (src/basic/env-file.c, parse_env_file_internal),
for tests of what `pacer config` prints: comments, quotes, escapes and trailing blanks as
systemd treats them."""

from __future__ import annotations

WHITESPACE = " \t\n\r"
SHELL_NEED_ESCAPE = '"\\`$'


def parse(text: str) -> dict[str, str]:
    """The variables ``text`` sets, as ``EnvironmentFile=`` would set them."""
    out: dict[str, str] = {}
    state, key, value = "pre_key", "", ""
    trailing: int | None = None  # where the unquoted value's trailing whitespace starts

    def push() -> None:
        out[key.strip()] = value[:trailing] if trailing is not None else value

    for c in text:
        if state == "pre_key":
            if c in "#;":
                state = "comment"
            elif c not in WHITESPACE:
                state, key = "key", c
        elif state == "key":
            if c == "\n":
                state, key = "pre_key", ""
            elif c == "=":
                state, value, trailing = "pre_value", "", None
            else:
                key += c
        elif state in ("pre_value", "value"):
            if c == "\n":
                push()
                state, key = "pre_key", ""
            elif state == "pre_value" and c in "'\"":
                state = "single" if c == "'" else "double"
            elif c == "\\":
                state, trailing = "escape", None
            elif state == "pre_value" and c in WHITESPACE:
                pass
            else:
                if c not in WHITESPACE:
                    trailing = None
                elif trailing is None and state == "value":
                    trailing = len(value)
                state, value = "value", value + c
        elif state == "escape":
            state = "value"
            value += "" if c == "\n" else c
        elif state == "single":
            if c == "'":
                state, trailing = "pre_value", None
            else:
                value += c
        elif state == "double":
            if c == '"':
                state, trailing = "pre_value", None
            elif c == "\\":
                state = "double_escape"
            else:
                value += c
        elif state == "double_escape":
            state = "double"
            if c in SHELL_NEED_ESCAPE:
                value += c
            elif c != "\n":
                value += "\\" + c
        elif state == "comment" and c == "\n":
            state = "pre_key"
    if state not in ("pre_key", "key", "comment"):
        push()
    return out
