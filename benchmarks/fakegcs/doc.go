// Command fakegcs serves local files as objects of a bucket on an in-process
// fake GCS server (fake-gcs-server) on 127.0.0.1, so that the storage path of
// meshfeed can be exercised without a bucket or credentials.
//
//	fakegcs --bucket meshfeed-bench d0/part-0.parquet=/data/part-0.parquet ...
//
// Each argument is OBJECT=PATH: the object name in the bucket and the local
// file that becomes its content. When ready it prints one line to stdout,
//
//	fakegcs: serving http://127.0.0.1:PORT gs://BUCKET
//
// and serves until SIGTERM or SIGINT, or until its stdin is closed (so that a
// parent that dies takes it along). Point a meshfeed server at it with
// STORAGE_EMULATOR_HOST=http://127.0.0.1:PORT. Objects are held in memory.
package main
