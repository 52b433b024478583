"""``python -m jt_core``: inspect jt's plugins (and caches)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence


def _plugins(args: argparse.Namespace) -> int:
    from jt_core.registry import list_plugins

    records = list_plugins()
    if args.json:
        json.dump([r.as_dict() for r in records], sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    rows = [("NAME", "DISTRIBUTION", "VERSION", "STATUS", "PROVIDES")]
    for r in records:
        provides = []
        if r.platforms:
            provides.append("backends: " + ",".join(r.platforms))
        if r.launchers:
            provides.append("launchers: " + ",".join(r.launchers))
        if r.dialects:
            provides.append("dialects: " + ",".join(r.dialects))
        rows.append((r.name, r.distribution, r.version, r.status, "; ".join(provides) or "-"))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row[:4], widths)) + "  " + row[4])
    for r in records:
        for label, details in r.launcher_details.items():
            if details["falls_back_for"]:
                rules = "; ".join(details["falls_back_for"])
                print(f"\n{label} hands a call to the platform's next launcher for: {rules}")
    for r in records:
        if r.error:
            print(f"\n{r.name}: {r.error}")
    return 0


def _cache(args: argparse.Namespace) -> int:
    from jt_core import cache

    if args.action == "clear":
        removed = cache.clear()
        print(f"removed {removed} entries from {cache.cache_dir()}")
        return 0
    data = cache.info()
    if args.json:
        json.dump(data, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    for key, value in data.items():
        if key != "folders":
            print(f"{key:17} {value}")
    print()
    for purpose, usage in data["folders"].items():
        print(f"{purpose + '/':12} {usage['files']:6} files {usage['bytes']:12} bytes  {usage['holds']}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m jt_core``."""
    parser = argparse.ArgumentParser(prog="python -m jt_core", description="Inspect jt's plugins and caches.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("plugins", help="list plugins: distribution, version, what they provide, status, errors")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=_plugins)
    c = sub.add_parser("cache", help="show or clear every folder jt keeps on this machine (JT_CACHE_DIR)")
    c.add_argument("action", choices=["info", "clear"])
    c.add_argument("--json", action="store_true", help="print JSON (info)")
    c.set_defaults(func=_cache)
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
