// Package objstoretest is what tests of stores share: the conformance suite
// every objstore.Store passes (Conformance), an in-process fake GCS
// (fake-gcs-server), an in-process fake S3 (FakeS3: gofakes3, checking the
// access key) and a range-serving static file server (FakeHTTP, with modes
// that misbehave) on 127.0.0.1, with a fault-injecting proxy in front of any
// of them (FaultFront), so that a suite written against objstore.Store runs
// on GCS, S3 and HTTPS as well as on local disk with no Docker and no
// network, and a directory tree
// of symlinks that stay inside or lead out of a root (RootTree).
//
// Everything it starts is stopped by t.Cleanup.
package objstoretest
