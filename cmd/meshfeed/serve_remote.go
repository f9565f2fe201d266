package main

import (
	"flag"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/meshfeed/meshfeed/objstore"
)

// remoteFlags are serve's flags for the remote stores beyond GCS (whose
// emulator is named by STORAGE_EMULATOR_HOST).
type remoteFlags struct {
	s3Endpoint  *string
	s3PathStyle *string
	s3Anonymous *bool
}

// newRemoteFlags defines the remote stores' flags on fs.
func newRemoteFlags(fs *flag.FlagSet) *remoteFlags {
	return &remoteFlags{
		s3Endpoint:  fs.String("s3-endpoint", "", "S3-compatible endpoint for s3:// URIs (MinIO, R2, CoreWeave: https://host[:port]); default AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, else AWS. Credentials and region come from the standard AWS chain (AWS_ACCESS_KEY_ID, AWS_PROFILE, AWS_REGION, instance roles)"),
		s3Anonymous: fs.Bool("s3-anonymous", false, "read s3:// without credentials (unsigned requests: public buckets such as AWS Open Data)"),
		s3PathStyle: fs.String("s3-path-style", "auto", "S3 bucket addressing: path (https://host/bucket/key), virtual (https://bucket.host/key) or auto (path with a custom endpoint, virtual on AWS)"),
	}
}

// muxOptions returns the store options the flags ask for.
func (r *remoteFlags) muxOptions() ([]objstore.MuxOption, error) {
	style, err := objstore.ParsePathStyle(*r.s3PathStyle)
	if err != nil {
		return nil, err
	}
	s3 := []objstore.S3Option{objstore.WithS3PathStyle(style)}
	if *r.s3Anonymous {
		s3 = append(s3, objstore.WithS3Credentials(aws.AnonymousCredentials{}))
	}
	if *r.s3Endpoint != "" {
		s3 = append(s3, objstore.WithS3Endpoint(*r.s3Endpoint))
	}
	return []objstore.MuxOption{objstore.WithS3Options(s3...)}, nil
}
