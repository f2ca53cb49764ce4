// Package remote is where a repository's pages meet other devices': an
// object store that knows only named, immutable objects (Backend), with two
// implementations, S3-compatible object storage (NewS3) and a local
// directory (NewDir), and the remote repository's configuration object,
// which says what the store holds (Open).
//
// As restic's backends do, a Backend knows nothing of what it stores: no
// pages, commits or pieces, only names, bytes and listings in key order.
//
// Layer: below the sync machinery; it imports no ledgerfs package.
package remote

import (
	"context"
	"errors"
)

// ErrNotFound reports an object that does not exist.
var ErrNotFound = errors.New("remote: no such object")

// ErrExists reports a Create of an object that exists already.
var ErrExists = errors.New("remote: object exists")

// A Backend stores named objects. Names are slash-separated paths relative
// to the backend's root (an S3 prefix, a directory), of ASCII letters,
// digits, '-', '_', '.' and '/'. Objects are written whole and never
// changed: every write of a name either creates it (Create, conditional),
// or writes what any other write of it would (Put of content-named data),
// so that a retry is harmless and no lock is needed. Only the bucket's
// collection deletes, under its lock (Lock), and what it deletes is
// announced first (see package cloudsync).
type Backend interface {
	// Create writes an object that must not exist yet, atomically:
	// ErrExists if it does (S3's If-None-Match: *).
	Create(ctx context.Context, name string, body []byte) error
	// Put writes an object whether or not it exists. Only for names whose
	// content is fixed by the name (a digest of it).
	Put(ctx context.Context, name string, body []byte) error
	// Get reads an object whole; ErrNotFound if it does not exist.
	Get(ctx context.Context, name string) ([]byte, error)
	// GetRange reads n bytes of an object from offset off.
	GetRange(ctx context.Context, name string, off, n int64) ([]byte, error)
	// List calls fn with each object whose name starts with prefix and
	// sorts after startAfter ("" for all), in key order, until fn returns
	// an error, which List returns.
	List(ctx context.Context, prefix, startAfter string, fn func(Object) error) error
	// Delete removes an object; deleting one that does not exist is no
	// error (a collection cut short deletes it again).
	Delete(ctx context.Context, name string) error
	// Location names the backend for messages: s3://bucket/prefix, a
	// directory.
	Location() string
}

// An Object is what a listing says of one object.
type Object struct {
	Name string
	Size int64
}
