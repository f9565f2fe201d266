"""Read one meshfeed DoGet stream with pyarrow.flight and print its throughput.

    python benchmarks/flight_pyarrow_bench.py --location grpc+unix:///tmp/s.sock \
        --ticket '{"version": 1, ...}'

With --check-rows, the first and last steps are checked (after timing) against
the Go benchmark's record: row r has id = r and x = [1024r, ..., 1024r + 1023].

Prints one JSON line: {"steps", "bytes", "seconds", "gb_per_s", "client_cpu_s"},
where bytes is the sum of the record batches' buffer sizes (what the Go
benchmark's b.SetBytes counts) and seconds run from do_get to the end of the
stream. Used by BenchmarkDoGetPyarrow in transport/bench_test.go.
"""

import argparse
import json
import time

import numpy as np
import pyarrow.flight as flight


def check(batch, what):
    n = batch.num_rows
    ids = batch.column("id").to_numpy()
    x = batch.column("x").flatten().to_numpy()
    if not np.array_equal(ids, np.arange(n)):
        raise SystemExit(f"{what}: id column is not 0..{n - 1}")
    if not np.array_equal(x, np.arange(n * 1024, dtype=np.float32)):
        raise SystemExit(f"{what}: x column is not [1024r + k]")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--location", required=True, help="grpc+tcp://host:port or grpc+unix:///path")
    ap.add_argument("--ticket", required=True, help="ticket JSON")
    ap.add_argument("--max-msg", type=int, default=256 << 20, help="client receive limit in bytes")
    ap.add_argument("--check-rows", action="store_true", help="check the first and last steps' values")
    ap.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                    help="extra gRPC channel argument (integer values); repeatable")
    args = ap.parse_args()

    options = [
        ("grpc.max_receive_message_length", args.max_msg),
        ("grpc.max_send_message_length", 1 << 20),
    ]
    for kv in args.option:
        key, _, value = kv.partition("=")
        options.append((key, int(value)))
    client = flight.FlightClient(args.location, generic_options=options)
    t0, c0 = time.perf_counter(), time.process_time()
    reader = client.do_get(flight.Ticket(args.ticket.encode()))
    steps = nbytes = 0
    first = last = None
    while True:
        try:
            chunk = reader.read_chunk()
        except StopIteration:
            break
        steps += 1
        nbytes += chunk.data.nbytes
        if first is None:
            first = chunk.data
        last = chunk.data
    seconds = time.perf_counter() - t0
    cpu = time.process_time() - c0
    if args.check_rows and first is not None:
        check(first, "first step")
        check(last, "last step")
    client.close()
    print(json.dumps({"steps": steps, "bytes": nbytes, "seconds": seconds,
                      "gb_per_s": nbytes / seconds / 1e9, "client_cpu_s": cpu}))


if __name__ == "__main__":
    main()
