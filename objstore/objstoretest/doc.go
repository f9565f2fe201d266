// Package objstoretest is what tests of stores share: the conformance suite
// every objstore.Store passes (Conformance), an in-process fake GCS
// (fake-gcs-server) on 127.0.0.1 with a fault-injecting proxy in front of it
// (FaultFront), so that a suite written against objstore.Store runs on GCS as
// well as on local disk with no Docker and no network, Azurite (npm, run with
// node; make azurite-setup installs it) for the Azure store (StartAzurite,
// SharedAzurite), and a directory tree of symlinks that stay inside or lead
// out of a root (RootTree).
//
// Everything it starts is stopped by t.Cleanup, except SharedAzurite's
// Azurite, which the package's TestMain stops (StopSharedAzurite) and which
// dies with the test binary on Linux.
package objstoretest
