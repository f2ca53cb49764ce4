package remote

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path"
	"strings"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// S3Config says where a repository's objects live in S3-compatible object
// storage.
type S3Config struct {
	// Endpoint is the server: a URL (http://127.0.0.1:9000) or host[:port]
	// (https). Empty: AWS_ENDPOINT_URL, else AWS S3 (s3.amazonaws.com).
	Endpoint string
	// Region is the bucket's region. Empty: AWS_REGION, else what the
	// server says.
	Region string
	Bucket string
	// Prefix is the folder of the repository's objects in the bucket
	// ("" for the bucket's root).
	Prefix string
	// PathStyle asks for path-style requests (http://host/bucket/key),
	// which most self-hosted servers need; AWS takes virtual hosts.
	PathStyle bool
	// Creds are the credentials; nil: the standard AWS_* variables, then
	// the shared credentials file (AWS_SHARED_CREDENTIALS_FILE,
	// ~/.aws/credentials, AWS_PROFILE), then an instance role.
	Creds *credentials.Credentials
}

// ParseURL parses a remote's URL, s3://BUCKET[/PREFIX], into a config
// whose other fields are empty.
func ParseURL(s string) (S3Config, error) {
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "s3" || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return S3Config{}, fmt.Errorf("remote %q: want s3://BUCKET or s3://BUCKET/PREFIX", s)
	}
	return S3Config{Bucket: u.Host, Prefix: strings.Trim(u.Path, "/")}, nil
}

type s3Backend struct {
	c      *minio.Client
	bucket string
	prefix string // "" or ending in "/"
}

// NewS3 connects to the bucket, creating it if missing. A server that
// cannot be reached and credentials it refuses are errors that say so.
func NewS3(ctx context.Context, cfg S3Config) (Backend, error) {
	endpoint := cfg.Endpoint
	if endpoint == "" {
		endpoint = os.Getenv("AWS_ENDPOINT_URL")
	}
	if endpoint == "" {
		endpoint = "https://s3.amazonaws.com"
	}
	if !strings.Contains(endpoint, "://") {
		endpoint = "https://" + endpoint
	}
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || strings.Trim(u.Path, "/") != "" {
		return nil, fmt.Errorf("remote: endpoint %q: want http(s)://HOST[:PORT]", endpoint)
	}
	region := cfg.Region
	if region == "" {
		region = os.Getenv("AWS_REGION")
	}
	creds := cfg.Creds
	if creds == nil {
		creds = credentials.NewChainCredentials([]credentials.Provider{
			&credentials.EnvAWS{},
			&credentials.FileAWSCredentials{},
			&credentials.IAM{},
		})
	}
	lookup := minio.BucketLookupAuto
	if cfg.PathStyle {
		lookup = minio.BucketLookupPath
	}
	c, err := minio.New(u.Host, &minio.Options{
		Creds:        creds,
		Secure:       u.Scheme == "https",
		Region:       region,
		BucketLookup: lookup,
	})
	if err != nil {
		return nil, fmt.Errorf("remote: %w", err)
	}
	b := &s3Backend{c: c, bucket: cfg.Bucket}
	if cfg.Prefix != "" {
		b.prefix = strings.Trim(cfg.Prefix, "/") + "/"
	}
	if err := b.ensureBucket(ctx, region, u.Host); err != nil {
		return nil, err
	}
	return b, nil
}

func (b *s3Backend) Location() string {
	return "s3://" + path.Join(b.bucket, b.prefix)
}

// ensureBucket creates the bucket if it does not exist.
func (b *s3Backend) ensureBucket(ctx context.Context, region, host string) error {
	ok, err := b.c.BucketExists(ctx, b.bucket)
	if err != nil {
		return b.describe(err, host)
	}
	if ok {
		return nil
	}
	err = b.c.MakeBucket(ctx, b.bucket, minio.MakeBucketOptions{Region: region})
	if err != nil {
		code := minio.ToErrorResponse(err).Code
		if code == "BucketAlreadyOwnedByYou" || code == "BucketAlreadyExists" {
			return nil // made meanwhile by another device
		}
		return b.describe(err, host)
	}
	return nil
}

// describe turns an error of the first request into one that says what
// went wrong: a server that cannot be reached, credentials refused.
func (b *s3Backend) describe(err error, host string) error {
	var nerr net.Error
	var operr *net.OpError
	if errors.As(err, &operr) || errors.As(err, &nerr) {
		return fmt.Errorf("remote: cannot reach the S3 server at %s: %w", host, err)
	}
	switch minio.ToErrorResponse(err).Code {
	case "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", "ExpiredToken":
		return fmt.Errorf("remote: the S3 server at %s refused the credentials for bucket %s (check AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY or AWS_PROFILE): %w", host, b.bucket, err)
	}
	if strings.Contains(err.Error(), "no credentials") || strings.Contains(err.Error(), "Access Key Id") {
		return fmt.Errorf("remote: no credentials for the S3 server at %s (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE): %w", host, err)
	}
	return fmt.Errorf("remote: bucket %s at %s: %w", b.bucket, host, err)
}

func (b *s3Backend) key(name string) (string, error) {
	if err := checkName(name); err != nil {
		return "", err
	}
	return b.prefix + name, nil
}

func (b *s3Backend) put(ctx context.Context, name string, body []byte, create bool) error {
	key, err := b.key(name)
	if err != nil {
		return err
	}
	// No SHA-256 of the payload for the signature over plain HTTP: what
	// is stored is checked where it is read (content names, digests),
	// and hashing every byte halved the upload rate here.
	opts := minio.PutObjectOptions{ContentType: "application/octet-stream", DisableMultipart: len(body) < 64<<20,
		DisableContentSha256: true}
	if create {
		opts.SetMatchETagExcept("*")
	}
	_, err = b.c.PutObject(ctx, b.bucket, key, bytes.NewReader(body), int64(len(body)), opts)
	if err != nil {
		code := minio.ToErrorResponse(err).Code
		if create && (code == minio.PreconditionFailed || code == "ConditionalRequestConflict") {
			return fmt.Errorf("%s: %w", name, ErrExists)
		}
		return fmt.Errorf("remote: put %s: %w", name, err)
	}
	return nil
}

func (b *s3Backend) Create(ctx context.Context, name string, body []byte) error {
	return b.put(ctx, name, body, true)
}

func (b *s3Backend) Put(ctx context.Context, name string, body []byte) error {
	return b.put(ctx, name, body, false)
}

func (b *s3Backend) Delete(ctx context.Context, name string) error {
	key, err := b.key(name)
	if err != nil {
		return err
	}
	// S3 answers a delete of a missing key with success.
	if err := b.c.RemoveObject(ctx, b.bucket, key, minio.RemoveObjectOptions{}); err != nil {
		return fmt.Errorf("remote: delete %s: %w", name, err)
	}
	return nil
}

// get reads an object, or with n >= 0 the range opts names, n bytes long:
// read into a buffer of that size, not grown as it comes.
func (b *s3Backend) get(ctx context.Context, name string, opts minio.GetObjectOptions, n int64) ([]byte, error) {
	key, err := b.key(name)
	if err != nil {
		return nil, err
	}
	obj, err := b.c.GetObject(ctx, b.bucket, key, opts)
	if err == nil {
		defer obj.Close()
		var data []byte
		if n < 0 {
			data, err = io.ReadAll(obj)
		} else {
			data = make([]byte, n)
			var m int
			m, err = io.ReadFull(obj, data)
			if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
				err = fmt.Errorf("range %s: want %d bytes, got %d", opts.Header().Get("Range"), n, m)
			}
		}
		if err == nil {
			return data, nil
		}
	}
	if minio.ToErrorResponse(err).Code == minio.NoSuchKey {
		return nil, fmt.Errorf("%s: %w", name, ErrNotFound)
	}
	return nil, fmt.Errorf("remote: get %s: %w", name, err)
}

func (b *s3Backend) Get(ctx context.Context, name string) ([]byte, error) {
	return b.get(ctx, name, minio.GetObjectOptions{}, -1)
}

func (b *s3Backend) GetRange(ctx context.Context, name string, off, n int64) ([]byte, error) {
	var opts minio.GetObjectOptions
	if err := opts.SetRange(off, off+n-1); err != nil {
		return nil, err
	}
	return b.get(ctx, name, opts, n)
}

func (b *s3Backend) List(ctx context.Context, prefix, startAfter string, fn func(Object) error) error {
	opts := minio.ListObjectsOptions{Prefix: b.prefix + prefix, Recursive: true}
	if startAfter != "" {
		opts.StartAfter = b.prefix + startAfter
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // stops the listing's goroutine when fn stops early
	for o := range b.c.ListObjects(ctx, b.bucket, opts) {
		if o.Err != nil {
			return fmt.Errorf("remote: list %s: %w", prefix, o.Err)
		}
		name := strings.TrimPrefix(o.Key, b.prefix)
		if name <= startAfter {
			continue // servers that ignore StartAfter
		}
		if err := fn(Object{Name: name, Size: o.Size}); err != nil {
			return err
		}
	}
	return ctx.Err()
}
