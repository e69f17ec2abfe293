// s3worker: the object sweep's client (studies/object_sweep/run.py): one batch of whole-object GETs or PUTs on
// the target's store, a directory's files or an S3 bucket through minio-go, with `concurrency` requests in flight
// (goroutines sharing one client, one connection each). Python only starts it and reads its counts. With op
// "serve" (serve.go) it is instead the S3 data path of a study's worker process: emulate's loaders (core/s3mover.py).
//
// It speaks the JSON lines of kit/child.py: its configuration is the first line on stdin ({"op", "size",
// "concurrency", "seed", "keys", "store": the target's core.store.StoreHandle}), S3 credentials in its environment
// (STORAGEBRIEF_S3_ACCESS / STORAGEBRIEF_S3_SECRET; else AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or the AWS
// profile the handle names), never argv. It says {"event": "ready"} once its client and a PUT's body are made,
// runs the batch on {"cmd": "go"} and says {"event": "done", "batch": {...}} or {"event": "done", "error": "..."}.
// A GET counts the bytes it received and fails when they are not the object's size; a PUT counts its body once
// the store acknowledged it. Every request is timed from its start to its last byte; the CPU is this process's
// (getrusage: user + system, every thread) over the batch.
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

type s3Reach struct {
	Endpoint   string `json:"endpoint"`
	Bucket     string `json:"bucket"`
	Region     string `json:"region"`
	Profile    string `json:"profile"`
	VerifyTLS  *bool  `json:"verify_tls"`
	Addressing string `json:"addressing"`
}

type config struct {
	Op          string   `json:"op"`
	Size        int64    `json:"size"`
	Concurrency int      `json:"concurrency"`
	Seed        int64    `json:"seed"`
	Keys        []string `json:"keys"`
	Store       struct {
		Folder *string  `json:"folder"`
		S3     *s3Reach `json:"s3"`
	} `json:"store"`
}

// one request on the store: the bytes sent (PUT) or received (GET)
type request func(ctx context.Context, key string) (int64, error)

// read buffers (1 MiB), one per request in flight, reused: a buffer made per request cost more CPU than the
// request itself at small objects
var buffers = sync.Pool{New: func() any { b := make([]byte, 1<<20); return &b }}

func say(event map[string]any) {
	out, _ := json.Marshal(event)
	fmt.Println(string(out))
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return -1
	}
	return float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
}

func folderRequests(folder string, op string, body []byte) request {
	if op == "put" { // a whole file written and closed (no fsync, no rename), as a plain file write
		return func(_ context.Context, key string) (int64, error) {
			err := os.WriteFile(filepath.Join(folder, key), body, 0o666)
			if err != nil {
				return 0, err
			}
			return int64(len(body)), nil
		}
	}
	return func(_ context.Context, key string) (int64, error) { // read to its end in 1 MiB reads, dropped
		f, err := os.Open(filepath.Join(folder, key))
		if err != nil {
			return 0, err
		}
		defer f.Close()
		bp := buffers.Get().(*[]byte)
		defer buffers.Put(bp)
		buf := *bp
		var n int64
		for {
			m, err := f.Read(buf)
			n += int64(m)
			if errors.Is(err, io.EOF) {
				return n, nil
			}
			if err != nil {
				return n, err
			}
		}
	}
}

func s3Client(r *s3Reach, conc int) (*minio.Client, error) {
	u, err := url.Parse(r.Endpoint)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("endpoint %q is not a URL like http://127.0.0.1:7070", r.Endpoint)
	}
	secure := u.Scheme == "https"
	transport, err := minio.DefaultTransport(secure)
	if err != nil {
		return nil, err
	}
	transport.MaxIdleConnsPerHost, transport.MaxConnsPerHost = conc, conc // one connection per request in flight
	if secure && r.VerifyTLS != nil && !*r.VerifyTLS {
		transport.TLSClientConfig = &tls.Config{InsecureSkipVerify: true}
	}
	var creds *credentials.Credentials
	if access := os.Getenv("STORAGEBRIEF_S3_ACCESS"); access != "" {
		creds = credentials.NewStaticV4(access, os.Getenv("STORAGEBRIEF_S3_SECRET"), "")
		os.Unsetenv("STORAGEBRIEF_S3_ACCESS")
		os.Unsetenv("STORAGEBRIEF_S3_SECRET")
	} else {
		creds = credentials.NewChainCredentials([]credentials.Provider{
			&credentials.EnvAWS{}, &credentials.FileAWSCredentials{Profile: r.Profile}})
	}
	lookup := minio.BucketLookupPath
	if r.Addressing == "virtual" {
		lookup = minio.BucketLookupDNS
	}
	// MaxRetries 1: one attempt, no retries (as the project's boto3 clients): a failure is a finding, not noise.
	// TrailingHeaders: minio-go sends a PUT's checksum (putOptions) only with it on
	return minio.New(u.Host, &minio.Options{Creds: creds, Secure: secure, Region: r.Region, Transport: transport,
		BucketLookup: lookup, MaxRetries: 1, TrailingHeaders: true})
}

// A PUT is checked as the AWS SDKs check one by default: its body's CRC32C (computed per request) in the
// x-amz-checksum-crc32c header, which the store verifies and keeps, the payload itself unsigned; not with
// minio-go's default over plain HTTP, a SHA-256 signature per 64 KiB chunk that client and gateway both compute:
// measured beside s3dlio (whose AWS SDK sends a CRC), that cost the client 1.45-1.80 CPU-s/GB against its
// 1.05-1.33 at PUT 32 MiB x8 (docs/studies/object_sweep.md). Single-part: one request per object.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// the body's CRC32C as S3's checksum headers carry it (base64 of its 4 bytes, big-endian)
func crc32c(body []byte) string {
	sum := crc32.Checksum(body, castagnoli)
	return base64.StdEncoding.EncodeToString([]byte{byte(sum >> 24), byte(sum >> 16), byte(sum >> 8), byte(sum)})
}

func putOptions(body []byte) minio.PutObjectOptions {
	return minio.PutObjectOptions{ContentType: "application/octet-stream", DisableMultipart: true,
		DisableContentSha256: true, UserMetadata: map[string]string{"x-amz-checksum-crc32c": crc32c(body)}}
}

func s3Requests(client *minio.Client, bucket string, op string, body []byte) request {
	if op == "put" {
		return func(ctx context.Context, key string) (int64, error) {
			_, err := client.PutObject(ctx, bucket, key, bytes.NewReader(body), int64(len(body)), putOptions(body))
			if err != nil {
				return 0, err
			}
			return int64(len(body)), nil
		}
	}
	return func(ctx context.Context, key string) (int64, error) {
		obj, err := client.GetObject(ctx, bucket, key, minio.GetObjectOptions{})
		if err != nil {
			return 0, err
		}
		defer obj.Close()
		bp := buffers.Get().(*[]byte)
		defer buffers.Put(bp)
		return io.CopyBuffer(io.Discard, obj, *bp)
	}
}

// eachOf runs do(i) for every i in [0, n) on `workers` goroutines, each taking the next index; the first error
// stops the others from starting another and is returned
func eachOf(n, workers int, do func(i int) error) error {
	var next int64
	var mu sync.Mutex
	var first error
	var failed atomic.Bool
	var wg sync.WaitGroup
	for w := 0; w < min(workers, n); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !failed.Load() {
				i := int(atomic.AddInt64(&next, 1) - 1)
				if i >= n {
					return
				}
				if err := do(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					failed.Store(true)
					return
				}
			}
		}()
	}
	wg.Wait()
	return first
}

func run(cfg *config, one request) map[string]any {
	ctx := context.Background()
	lat := make([]float64, len(cfg.Keys))
	var moved int64
	cpu0, t0 := cpuSeconds(), time.Now()
	err := eachOf(len(cfg.Keys), cfg.Concurrency, func(i int) error {
		start := time.Now()
		n, err := one(ctx, cfg.Keys[i])
		if err == nil && n != cfg.Size {
			err = fmt.Errorf("returned %d of %d bytes: a short body is not a whole object", n, cfg.Size)
		}
		if err != nil {
			return fmt.Errorf("%s %s: %v", cfg.Op, cfg.Keys[i], err)
		}
		lat[i] = time.Since(start).Seconds()
		atomic.AddInt64(&moved, n)
		return nil
	})
	wall, cpu := time.Since(t0).Seconds(), cpuSeconds()-cpu0
	if err != nil {
		return map[string]any{"event": "done", "error": err.Error()}
	}
	return map[string]any{"event": "done", "batch": map[string]any{
		"op": cfg.Op, "objects": len(cfg.Keys), "object_bytes": cfg.Size, "bytes_moved": moved,
		"concurrency": cfg.Concurrency, "wall_seconds": wall, "client_cpu_seconds": cpu, "latencies_s": lat}}
}

func main() {
	in := bufio.NewReaderSize(os.Stdin, 1<<20)
	line, err := in.ReadBytes('\n')
	var cfg config
	if err == nil {
		err = json.Unmarshal(line, &cfg)
	}
	if err != nil {
		say(map[string]any{"event": "error", "error": fmt.Sprintf("no configuration on stdin: %v", err)})
		os.Exit(2)
	}
	if cfg.Op == "serve" { // a worker's data path (serve.go): S3 only
		if cfg.Store.S3 == nil || cfg.Concurrency < 1 {
			say(map[string]any{"event": "error", "error": fmt.Sprintf(
				"serve needs an S3 store and concurrency >= 1 (got %d)", cfg.Concurrency)})
			os.Exit(2)
		}
		client, err := s3Client(cfg.Store.S3, cfg.Concurrency)
		if err != nil {
			say(map[string]any{"event": "error", "error": fmt.Sprintf("S3 client: %v", err)})
			os.Exit(2)
		}
		serve(func() ([]byte, error) { return in.ReadBytes('\n') }, client, cfg.Store.S3.Bucket)
		return
	}
	if (cfg.Op != "get" && cfg.Op != "put") || cfg.Concurrency < 1 || cfg.Size < 1 {
		say(map[string]any{"event": "error", "error": fmt.Sprintf(
			"op %q (allowed: get, put, serve), concurrency %d and size %d (both >= 1)", cfg.Op, cfg.Concurrency,
			cfg.Size)})
		os.Exit(2)
	}
	var body []byte
	if cfg.Op == "put" { // made once, the one copy every request sends; random: incompressible
		body = make([]byte, cfg.Size)
		rand.New(rand.NewSource(cfg.Seed)).Read(body)
	}
	var one request
	switch {
	case cfg.Store.Folder != nil:
		one = folderRequests(*cfg.Store.Folder, cfg.Op, body)
	case cfg.Store.S3 != nil:
		client, err := s3Client(cfg.Store.S3, cfg.Concurrency)
		if err != nil {
			say(map[string]any{"event": "error", "error": fmt.Sprintf("S3 client: %v", err)})
			os.Exit(2)
		}
		one = s3Requests(client, cfg.Store.S3.Bucket, cfg.Op, body)
	default:
		say(map[string]any{"event": "error", "error": "the configuration names no store (folder or s3)"})
		os.Exit(2)
	}
	say(map[string]any{"event": "ready"})
	for {
		line, err := in.ReadBytes('\n')
		var cmd map[string]any
		if err != nil || json.Unmarshal(line, &cmd) != nil || cmd["cmd"] == "exit" {
			return
		}
		if cmd["cmd"] == "go" {
			say(run(&cfg, one))
		}
	}
}
