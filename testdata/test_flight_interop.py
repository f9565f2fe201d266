"""pyarrow.flight reads a meshfeed server: the wire is plain Arrow Flight.

Starts `meshfeed serve --backend demo` (the binary from $MESHFEED_BIN, else
`meshfeed` on PATH, else bin/meshfeed) on a Unix socket and on loopback TCP, and
checks docs/PROTOCOL.md from a client written in another language: schema first,
one message per step with JSON app_metadata, the plan in GetFlightInfo, status codes
as typed pyarrow exceptions, and the bearer token.

The demo dataset's row i is id=i, x=[4i, 4i+1, 4i+2, 4i+3]. Expected values below
are derived by hand from the contract: N=10 rows, D=2 contiguous streams
(rows 0..4 and 5..9), b=B/D=2 rows per slice.
"""

import json
import os
import pathlib
import shutil
import subprocess

import pyarrow as pa
import pyarrow.flight as flight
import pytest

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
MAX_MSG = 256 << 20


def meshfeed_binary():
    tried = []
    for cand in (os.environ.get("MESHFEED_BIN"), shutil.which("meshfeed"), str(ROOT / "bin" / "meshfeed")):
        if cand:
            tried.append(cand)
            if os.access(cand, os.X_OK):
                return cand
    raise FileNotFoundError(f"meshfeed binary not found; tried {tried} (run `make build`)")


DEMO = ("--backend", "demo", "--demo-rows", "10", "--allow", "/data")


class Server:
    def __init__(self, *args, base=DEMO):
        self.proc = subprocess.Popen(
            [meshfeed_binary(), "serve", *base, *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if not line.startswith("meshfeed: listening on "):
            self.proc.kill()
            raise RuntimeError(f"server did not start: {line!r} {self.proc.stderr.read()}")
        addr = line.split()[-1]
        self.location = addr.replace("unix://", "grpc+unix://") if addr.startswith("unix://") else "grpc+tcp://" + addr

    def stop(self):
        self.proc.terminate()
        try:
            assert self.proc.wait(timeout=20) == 0, self.proc.stderr.read()
        finally:
            self.proc.kill()
            self.proc.stdout.close()
            self.proc.stderr.close()


@pytest.fixture(params=["unix", "tcp"])
def server(request, tmp_path):
    args = ["--addr", "unix://" + str(tmp_path / "s.sock")] if request.param == "unix" else []
    srv = Server(*args)
    yield srv
    srv.stop()


def client(srv):
    return flight.FlightClient(srv.location, generic_options=[("grpc.max_receive_message_length", MAX_MSG)])


def request(**kw):
    req = {"version": 1, "datasets": ["/data/demo/*.parquet"], "global_batch_size": 4,
           "num_slices": 2, "slices": [0, 1], "last_batch": "pad", "epochs": 1}
    req.update(kw)
    return json.dumps(req).encode()


def test_doget_steps(server):
    reader = client(server).do_get(flight.Ticket(request()))
    assert reader.schema.names == ["id", "x", "valid"]
    steps = []
    while True:
        try:
            chunk = reader.read_chunk()
        except StopIteration:
            break
        steps.append((json.loads(chunk.app_metadata.to_pybytes()), chunk.data))
    assert [m for m, _ in steps] == [
        {"epoch": 0, "step": 0, "slices": [0, 1], "real_rows": [2, 2]},
        {"epoch": 0, "step": 1, "slices": [0, 1], "real_rows": [2, 2]},
        {"epoch": 0, "step": 2, "slices": [0, 1], "real_rows": [1, 1]},
    ]
    assert [b.column("id").to_pylist() for _, b in steps] == [[0, 1, 5, 6], [2, 3, 7, 8], [4, 0, 9, 0]]
    assert steps[2][1].column("valid").to_pylist() == [True, False, True, False]
    assert steps[1][1].column("x").to_pylist()[0] == [8.0, 9.0, 10.0, 11.0]


def test_flight_info(server):
    info = client(server).get_flight_info(flight.FlightDescriptor.for_command(request(last_batch="drop")))
    assert info.schema.names == ["id", "x"]
    assert json.loads(info.app_metadata) == {"num_rows": 10, "steps_per_epoch": 2, "dropped_rows": 2, "padded_rows": 0}
    table = client(server).do_get(info.endpoints[0].ticket).read_all()
    assert table.column("id").to_pylist() == [0, 1, 5, 6, 2, 3, 7, 8]


def test_errors(server):
    c = client(server)
    with pytest.raises(pa.ArrowInvalid, match="not a multiple of num_slices"):
        # INVALID_ARGUMENT surfaces as pyarrow.ArrowInvalid.
        c.do_get(flight.Ticket(request(global_batch_size=5))).read_all()
    with pytest.raises(flight.FlightUnauthorizedError, match="not under an allowed root"):
        # PERMISSION_DENIED surfaces as FlightUnauthorizedError.
        c.do_get(flight.Ticket(request(datasets=["/etc/passwd"]))).read_all()
    with pytest.raises(pa.ArrowInvalid, match="precondition failed.*N=10 rows is not a multiple of B=4"):
        # FAILED_PRECONDITION surfaces as pyarrow.ArrowInvalid too.
        c.get_flight_info(flight.FlightDescriptor.for_command(request(last_batch="raise")))


def test_token(tmp_path):
    tok = tmp_path / "token"
    tok.write_text("s3cret\n")
    srv = Server("--token-file", str(tok))
    try:
        c = client(srv)
        with pytest.raises(flight.FlightUnauthenticatedError):
            c.do_get(flight.Ticket(request())).read_all()
        opts = flight.FlightCallOptions(headers=[(b"authorization", b"Bearer s3cret")])
        assert c.do_get(flight.Ticket(request()), opts).read_all().num_rows == 12
    finally:
        srv.stop()


M64 = (1 << 64) - 1


def mix64(x):
    """datagen's SplitMix64 finalizer (internal/datagen/values.go)."""
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & M64
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & M64
    x ^= x >> 31
    return x


def datagen_label(seed, i):
    """Column `label` of row i: mix(mix(seed ^ tagLabel) ^ id) % 1000."""
    return mix64(mix64(seed ^ 0x6C6162656C000001) ^ i) % 1000


def test_pipeline_backend(tmp_path):
    """`serve --backend pipeline` over files written by `meshfeed gen`: N=50 rows in
    3 files of 4-row row groups, B=6, D=2, last_batch=drop. By the contract the
    streams are ids 0..24 and 25..49, b=3, floor(50/6)=8 steps, and step s holds
    ids [3s, 3s+3) of stream 0 then [25+3s, 25+3s+3) of stream 1."""
    data = tmp_path / "ds"
    subprocess.run([meshfeed_binary(), "gen", "--out", str(data), "--rows", "50", "--files", "3",
                    "--row-group-rows", "4", "--features", "2", "--seed", "3"],
                   check=True, capture_output=True)
    srv = Server("--addr", "unix://" + str(tmp_path / "p.sock"), base=("--backend", "pipeline", "--allow", str(data)))
    try:
        c = client(srv)

        def req(**kw):
            r = {"version": 1, "datasets": [str(data) + "/*.parquet"], "columns": [{"name": "id"}, {"name": "label"}],
                 "global_batch_size": 6, "num_slices": 2, "slices": [0, 1], "last_batch": "drop", "epochs": 1}
            r.update(kw)
            return json.dumps(r).encode()

        info = c.get_flight_info(flight.FlightDescriptor.for_command(req()))
        plan = json.loads(info.app_metadata)
        # The plan, and how it was made: no manifest beside the data (one Stat looked),
        # so the files were listed and each footer read (3 files): 5 requests.
        assert plan == {"num_rows": 50, "steps_per_epoch": 8, "dropped_rows": 2, "padded_rows": 0,
                        "manifest_reason": f"no manifest at {data}/_meshfeed_manifest.parquet", "plan_requests": 5}
        assert info.schema.names == ["id", "label"]

        reader = c.do_get(flight.Ticket(req()))
        steps = []
        while True:
            try:
                chunk = reader.read_chunk()
            except StopIteration:
                break
            steps.append((json.loads(chunk.app_metadata.to_pybytes()), chunk.data))
        assert [m for m, _ in steps] == [
            {"epoch": 0, "step": s, "slices": [0, 1], "real_rows": [3, 3]} for s in range(8)]
        for s, (_, batch) in enumerate(steps):
            ids = batch.column("id").to_pylist()
            assert ids == [3 * s, 3 * s + 1, 3 * s + 2, 25 + 3 * s, 26 + 3 * s, 27 + 3 * s]
            assert batch.column("label").to_pylist() == [datagen_label(3, i) for i in ids]

        # Shuffled (row groups and windows of 5 rows): each delivered row exactly
        # once, 48 of 50, labels still a function of the id; slice 1 alone gets
        # the second half of every global batch.
        shuf = {"enabled": True, "window": 5}
        both = c.do_get(flight.Ticket(req(seed=9, shuffle=shuf))).read_all()
        ids = both.column("id").to_pylist()
        assert len(ids) == 48 and len(set(ids)) == 48 and set(ids) <= set(range(50))
        assert both.column("label").to_pylist() == [datagen_label(3, i) for i in ids]
        one = c.do_get(flight.Ticket(req(seed=9, shuffle=shuf, slices=[1]))).read_all()
        assert one.column("id").to_pylist() == [i for k, i in enumerate(ids) if k % 6 >= 3]

        with pytest.raises(pa.ArrowInvalid, match="precondition failed.*N=50.*B=6.*remainder of 2"):
            c.get_flight_info(flight.FlightDescriptor.for_command(req(last_batch="raise")))
        with pytest.raises(pa.ArrowKeyError, match="not found error.*none-"):
            # NOT_FOUND surfaces as pyarrow.ArrowKeyError.
            c.get_flight_info(flight.FlightDescriptor.for_command(req(datasets=[str(data) + "/none-*.parquet"])))
    finally:
        srv.stop()
