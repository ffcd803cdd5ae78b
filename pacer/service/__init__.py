"""The service: journal, dispatch policy, pipeline, metrics and jobs, without its HTTP API.

- ``lifecycle``: `Service`. Construction does no I/O. ``open`` takes the journal's lock, opens
  it, loads the workload and restores the controller's estimates; ``start`` fits the memory
  budget to the host, prepares the workload (the pinned pool), resumes the jobs the journal
  holds unfinished (completed partitions are not redone) and starts the pipeline, the commit
  loop and upkeep; ``shutdown`` drains and closes.
- ``jobs``: accepting and cancelling jobs, resuming them, and what follows a failed attempt: it
  is queued again at its job's place after a backoff (``PACER_RETRY__*``); after
  ``PACER_RETRY__MAX`` its job fails, naming it.
- ``commits``: the commit loop, batching results and failed attempts into the journal; upkeep.
- ``journal_access``: the journal's lock, its thread, its health, and what waits for it.
- ``stopping``: how long a stop waits for the journal (``JournalStop``).
- ``assembly``: what is decided without I/O: the bind check, saved estimates read back, the
  pipeline's observer. What the service runs by is `pacer.plan.Plan`; its policy comes from
  `pacer.control.registry.build_policy`.
- ``host``: the host's memory read for the plan, the pinned pool, the workload's close.
- ``fleet``: a host of a fleet (a PostgreSQL journal): partitions claimed ahead of dispatch,
  leases renewed and given back, word of work heard.

A drain stops dispatch; in-flight partitions may finish within ``PACER_SHUTDOWN__DRAIN_S``
(`Service.hurry` cuts it short), results and estimates are committed, and what did not finish
stays in the journal for the next start. A call that hangs does not hold it: its thread is a
daemon, and the workload's close gets at most ``host.CLOSE_WORKLOAD_S`` when calls are still
in flight or hung.

The dispatch loop, the commit loop and upkeep run under a ``Supervisor`` (restarted after a
failure); ``unready_reasons()`` says why the service is not ready: starting, draining, a task
down, stalled (``ProgressWatchdog``), and what any other readiness source says.

A failing journal (disk full, I/O errors, a lock held elsewhere, the file deleted) stops
nothing that was accepted: results wait in memory and their commit is retried with backoff;
meanwhile the service is not ready and refuses new jobs with the reason. A drain tries to
commit them within its budget: what was not committed stays pending in the journal and is
proved again on the next start.
A journal call that does not return raises nothing; one past ``PACER_JOURNAL__STALL_S`` makes
the service unready, refuses new jobs and is logged (``journal_access``). A stop waits for it
until the drain budget ends, at least ``PACER_SHUTDOWN__JOURNAL_S``, then leaves it to its
daemon thread, logs it with what was not committed, and goes on in order (``stopping``).

This package's ``__init__`` imports nothing: `pacer serve` imports `first_steps` and begins
the pool's pinning before it imports the rest. Nothing here imports the HTTP layer: `pacer.api`
reads the service, and `pacer.server` serves one over HTTP with signals and sd_notify.
"""
