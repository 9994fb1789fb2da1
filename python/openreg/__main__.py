"""``python -m openreg info``: engines found, the active chain, the devices.

``python -m openreg conformance <engine>``: compares an engine with torch CPU (see
:mod:`openreg.conformance`). ``python -m openreg tune``: measures the engines on this
machine and writes the routing table the default chain follows (see
:mod:`openreg.tuning`). ``python -m openreg cmake-prefix-path``: the SDK prefix.
"""

import argparse
import sys


def _info() -> int:
    import torch  # noqa: F401  (autoloads openreg)
    import openreg

    print(f"openreg engine ABI {openreg._C._abi_version()}")
    print(f"engine folder: {openreg._C._engine_dir()}")
    print("engines found:")
    for e in openreg.engines_available():
        print(f"  {e['name']:<12} {e['path']}")
    try:
        info = openreg.info()
    except RuntimeError as exc:
        print(f"chain: cannot be loaded: {exc}", file=sys.stderr)
        return 1
    print("chain (routing order):")
    for e in info["engines"]:
        ops = f"{e['num_ops']} ops advertised" + (", takes any op" if e["any_op"] else "")
        print(f"  {e['name']:<12} version {e['version']}, ABI {e['abi_version']}, {ops}, {e['path']}")
    print(f"devices: {info['devices']} (openreg:0 .. openreg:{info['devices'] - 1})")
    from . import tuning

    if info["tuned_routes"]:
        import json

        with open(info["tuned_routes"]) as f:
            table = json.load(f)
        per_threads = []
        for t, c in sorted(table["choices"].items(), key=lambda kv: int(kv[0])):
            moved = sum(1 for prefer in c["routes"].values() for e in prefer if e)
            shapes = sum(len(per_shape) for per_shape in c["shapes"].values())
            per_threads.append(f"{t} thread(s): {moved} (op, dtype, size class) and {shapes} single shapes")
        print(f"tuned routing table: {info['tuned_routes']} (made {table['made']}; routed to their fastest engine "
              f"{'; '.join(per_threads)}; OPENREG_ROUTES=off ignores it)")
    elif tuning.ignored_table():
        path, why = tuning.ignored_table()
        print(f"tuned routing table: {path} ignored: {why}; run `python -m openreg tune` again")
    else:
        print(f"tuned routing table: none ({tuning.table_path()}); `python -m openreg tune` makes one")
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] == "tune":
        from . import tuning

        return tuning.main(argv[1:])
    if argv and argv[0] == "conformance":
        # Its own parser: it passes unknown arguments through to the ABI binary.
        from . import conformance

        return conformance.main(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m openreg")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="print the engines found, the active chain and the devices")
    sub.add_parser("cmake-prefix-path",
                   help="print the CMAKE_PREFIX_PATH entry for find_package(openreg) (the engine SDK)")
    sub.add_parser("tune", add_help=False,
                   help="measure the engines on this machine and route each op to the fastest "
                        "(python -m openreg tune --help)")
    sub.add_parser("conformance", add_help=False,
                   help="compare an engine with torch CPU, op by op, forward and autograd "
                        "(python -m openreg conformance --help)")
    args = parser.parse_args(argv)
    if args.command == "info":
        return _info()
    if args.command == "cmake-prefix-path":
        import openreg

        print(openreg.cmake_prefix_path)
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
