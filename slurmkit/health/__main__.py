"""``python -m slurmkit.health --plan FILE|- [--json]``: the check a sweep runs on each node, without the CLI.

``--relay FILE|-`` instead: check a group of nodes for a sweep, from this
node (see :mod:`slurmkit.health.relay`); prints the group's rows as JSON.

The same as ``slurmkit health check --plan FILE --json`` (same report, same
exit codes: 0 healthy, 1 unhealthy, 2 bad usage or plan), minus the
command-line framework's start-up: a sweep of thousands of nodes starts it
thousands of times.  Set ``health.command`` to ``[PYTHON, -m,
slurmkit.health]`` to have sweeps use it.
"""

import json
import sys

USAGE = "usage: python -m slurmkit.health --plan FILE|- [--json]  |  --relay FILE|-"


def main(argv=None) -> int:
    from slurmkit.errors import SlurmkitError, UsageError

    args = list(sys.argv[1:] if argv is None else argv)
    try:
        if "--json" in args:
            args.remove("--json")    # the only output there is
        if len(args) == 2 and args[0] == "--relay":
            from slurmkit.health import relay

            sys.stdout.write(relay.main_relay(args[1]) + "\n")
            return 0
        if len(args) != 2 or args[0] != "--plan":
            raise UsageError(USAGE)
        from slurmkit.health.this_node import check_plan

        report = check_plan(args[1]).report
    except SlurmkitError as exc:
        sys.stderr.write("Error: %s\n" % exc)
        return exc.exit_code
    sys.stdout.write(json.dumps(report.to_dict(), indent=2, sort_keys=True) + "\n")
    return 0 if report.healthy else 1


if __name__ == "__main__":
    sys.exit(main())
