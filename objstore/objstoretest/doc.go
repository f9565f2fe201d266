// Package objstoretest is what tests of stores share: the conformance suite
// every objstore.Store passes (Conformance), an in-process fake GCS
// (fake-gcs-server), an in-process fake S3 (FakeS3: gofakes3, checking the
// access key), a range-serving static file server (FakeHTTP, with modes
// that misbehave) on 127.0.0.1, Azurite (npm, run with node; make
// azurite-setup installs it) for the Azure store (StartAzurite,
// SharedAzurite), a fault-injecting proxy (FaultFront) and a latency and
// bandwidth proxy (LatencyFront) in front of any of them, so that a suite
// written against objstore.Store runs on GCS, S3, Azure and HTTPS as well as
// on local disk with no Docker and no network, and a directory tree of
// symlinks that stay inside or lead out of a root (RootTree); RangeReads
// records the byte ranges read through it, so that tests count them.
//
// Everything it starts is stopped by t.Cleanup, except SharedAzurite's
// Azurite, which the package's TestMain stops (StopSharedAzurite) and which
// dies with the test binary on Linux.
package objstoretest
