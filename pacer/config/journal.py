"""Where the job journal is and how the service uses it (``PACER_JOURNAL__*``): an SQLite file of
its own, or a PostgreSQL database that a fleet of pacers shares."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Self
from urllib.parse import unquote, urlsplit, urlunsplit

from pydantic import Field, SecretStr, field_validator, model_validator

from pacer.config.section import Section

POSTGRES_SCHEMES = ("postgresql://", "postgres://")
SQLITE_SCHEME = "sqlite:///"


# Connection parameters whose value is a secret, or says where one is (libpq's ``passfile``).
SECRET_PARAMETERS = ("password", "sslpassword", "passfile", "sslkey")


def redacted(url: str) -> str:
    """``url`` fit for a log line or an answer: the password of its address and every
    parameter that holds a secret or names where one is (`SECRET_PARAMETERS`, and any name
    with ``password``, ``secret`` or ``token`` in it) hidden; a URL that does not parse,
    hidden whole.

    >>> redacted("postgresql://pacer:s3cret@db:5432/pacer?sslmode=require&sslpassword=x")
    'postgresql://pacer:***@db:5432/pacer?sslmode=require&sslpassword=***'
    """
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises for a port that is not one
    except ValueError:
        return "(a URL that does not parse, not shown: it may hold a password)"
    netloc = parts.netloc
    if "@" in netloc:
        user, _, host = netloc.rpartition("@")
        if ":" in user:
            netloc = f"{user.partition(':')[0]}:***@{host}"
    query = "&".join(
        f"{key}={'***' if _secret(unquote(key)) else value}" if sep else key
        for key, sep, value in (item.partition("=") for item in parts.query.split("&") if item)
    )
    return urlunsplit(parts._replace(netloc=netloc, query=query))


def _secret(parameter: str) -> bool:
    name = parameter.lower()
    return name in SECRET_PARAMETERS or any(w in name for w in ("password", "secret", "token"))


class JournalSettings(Section):
    """The journal that makes accepted jobs survive a restart: an SQLite file of this service's
    own, or a PostgreSQL database that a fleet of pacers shares (every host accepts jobs into
    it and claims partitions from it)."""

    url: SecretStr | None = Field(
        None,
        description="Where the journal is: postgresql://user[:password]@host[:port]/database, "
        "a PostgreSQL database a fleet of pacers shares (pip install 'pacer[postgres]'); "
        "sqlite:///relative/path or sqlite:////absolute/path, or a path, an SQLite file of "
        "this service's own; unset: the SQLite file at PACER_JOURNAL__PATH (URL; secret: it "
        "may hold a password)",
    )
    path: Path = Field(
        Path("pacer-journal.sqlite"),
        description="SQLite file of the job journal, when PACER_JOURNAL__URL is unset (path)",
    )
    retention_s: float = Field(
        7 * 86400.0,
        gt=0,
        le=10 * 365 * 86400.0,
        description="How long finished jobs, their results and idempotency keys are kept (s)",
    )
    commit_interval_s: float = Field(
        0.05,
        gt=0,
        le=5,
        description="Partition results are committed in batches at most this far apart; a "
        "crash redoes at most that much work (s)",
    )
    busy_timeout_s: float = Field(
        5.0,
        ge=0,
        le=600,
        description="How long an SQLite journal write waits for a lock another program holds "
        "on the file before it fails and is retried later (s)",
    )
    accept_wait_s: float = Field(
        8.0,
        gt=0,
        le=3600,
        description="Longest a new job waits for the journal to hold it (a hung disk or "
        "database); past it the request gets 503 with Retry-After and the job is not "
        "accepted: should the write land later, the job is deleted again (s)",
    )
    stall_s: float = Field(
        30.0,
        gt=0,
        le=86400,
        description="Not ready, with an error logged, while one journal call has run this long "
        "without returning (a hung disk or mount, a database that does not answer); more than "
        "PACER_JOURNAL__BUSY_TIMEOUT_S, or PACER_JOURNAL__TIMEOUT_S with PostgreSQL (s)",
    )
    host: str | None = Field(
        None,
        min_length=1,
        max_length=200,
        description="This pacer's name in a fleet (PostgreSQL): whose leases and saved "
        "estimates; one pacer per name (a second one is refused at start); unset: the "
        "machine's hostname (name)",
    )
    lease_s: float = Field(
        30.0,
        ge=0.5,
        le=3600,
        description="PostgreSQL: how long partitions a host claimed stay its own without a "
        "renewal (renewed every third of it); a host that dies loses them this long after "
        "its last renewal, and other hosts prove them (s)",
    )
    pool_size: int = Field(
        4,
        ge=1,
        le=100,
        description="PostgreSQL: connections in the pool (commits and reads, claims, "
        "renewals), besides the host's own for its name and for notifications (connections)",
    )
    timeout_s: float = Field(
        5.0,
        gt=0,
        le=600,
        description="PostgreSQL: longest a statement, a connection, or a wait for a pooled "
        "connection may take before it fails and is retried (s)",
    )
    claim_max: int = Field(
        256,
        ge=1,
        le=10_000,
        description="PostgreSQL: most partitions one claim takes from the fleet's queue; a "
        "host keeps about what it dispatches in half a second claimed ahead, at least its "
        "synthesis concurrency, within this (partitions)",
    )

    @field_validator("url")
    @classmethod
    def _known_kind(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None:
            return value
        text = value.get_secret_value()
        sqlite_file = text.removeprefix(SQLITE_SCHEME) if text.startswith(SQLITE_SCHEME) else text
        if text.startswith(POSTGRES_SCHEMES):
            try:
                # Several servers, host1:port1,host2:port2 (libpq tries each): each is checked.
                head, _, rest = text.partition("://")
                netloc = rest.split("/", 1)[0].split("?", 1)[0]
                userinfo, at, hosts = netloc.rpartition("@")
                for host in hosts.split(","):
                    urlsplit(f"{head}://{userinfo}{at}{host}/").port  # noqa: B018 - raises
            except ValueError as exc:
                # Its own words name the part (an IPv6 address unclosed, a port out of range),
                # never the password.
                reason = str(exc).split(":")[0].split(" as ")[0]
                raise ValueError(
                    f"is not a URL a PostgreSQL database can be reached at ({reason}): "
                    "postgresql://user[:password]@host[:port]/database, an IPv6 host in [ ]"
                ) from None
            return value
        if sqlite_file and "://" not in sqlite_file:
            return value
        # Never echo it: it may hold a password.
        raise ValueError(
            "must be postgresql://…, sqlite:///… (with a path) or a path to an SQLite file"
        )

    @field_validator("host")
    @classmethod
    def _host_name(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[\x21-\x7e]+", value):
            raise ValueError("must be visible ASCII characters without spaces")
        return value

    @model_validator(mode="after")
    def _one_sqlite_file(self) -> Self:
        if self.url is not None and not self.fleet and "path" in self.model_fields_set:
            raise ValueError("url and path both name the SQLite file: set one of them")
        return self

    @model_validator(mode="after")
    def _stall_past_a_write(self) -> Self:
        timeout = "timeout_s" if self.fleet else "busy_timeout_s"
        if self.stall_s <= self.write_timeout_s:
            raise ValueError(
                f"stall_s ({self.stall_s:g} s) must be more than {timeout} "
                f"({self.write_timeout_s:g} s): a write may wait that long on a lock"
            )
        return self

    @property
    def fleet(self) -> bool:
        """Whether the journal is PostgreSQL's, shared by a fleet."""
        return self.url is not None and self.url.get_secret_value().startswith(POSTGRES_SCHEMES)

    @property
    def postgres_url(self) -> str:
        """The PostgreSQL URL, password included; ValueError for an SQLite journal."""
        if self.url is None or not self.fleet:
            raise ValueError("the journal is an SQLite file, not a PostgreSQL database")
        return self.url.get_secret_value()

    @property
    def sqlite_path(self) -> Path:
        """The SQLite file (``url``'s, else ``path``); ValueError for a PostgreSQL journal."""
        if self.url is None:
            return self.path
        if self.fleet:
            raise ValueError("the journal is a PostgreSQL database, not an SQLite file")
        return Path(self.url.get_secret_value().removeprefix(SQLITE_SCHEME))

    @property
    def location(self) -> str:
        """The journal as a log line names it: the file, or the URL without its password."""
        return redacted(self.postgres_url) if self.fleet else str(self.sqlite_path)

    @property
    def write_timeout_s(self) -> float:
        """Longest one write may wait (on a lock, a connection or the statement) (s)."""
        return self.timeout_s if self.fleet else self.busy_timeout_s
