"""The job journal in PostgreSQL, shared by a fleet of pacers, and the fleet's queue.

`PgJournal` (`journal`) has the SQLite journal's methods and semantics, from the same core on
`PgDialect` (`dialect`: where PostgreSQL's SQL differs), and the fleet's: `claim`, `renew`,
`release` and `leases` (`leases`), which hand a job's partitions to hosts as leased index
runs, and the host's own connection (`host_connection`: its name held, word of work heard).
`schema` holds the versions and migrates a database as a host starts; `database` the pool.
"""

from pacer.journal.fleet_backend import Claim, HostInUseError, Lease
from pacer.pgjournal.database import LEASE_S, POOL_SIZE, TIMEOUT_S, open_pool
from pacer.pgjournal.journal import PgJournal
from pacer.pgjournal.leases import MAX_CLAIM, WORK_CHANNEL
from pacer.pgjournal.schema import SCHEMA_VERSION, NewerDatabaseSchemaError, migrate

__all__ = [
    "LEASE_S",
    "MAX_CLAIM",
    "POOL_SIZE",
    "SCHEMA_VERSION",
    "TIMEOUT_S",
    "WORK_CHANNEL",
    "Claim",
    "HostInUseError",
    "Lease",
    "NewerDatabaseSchemaError",
    "PgJournal",
    "migrate",
    "open_pool",
]
