// s3ref: the compiled reference S3 client of benchmarks/object_clients.py (minio-go, goroutines, one client).
//
// It moves one batch the way the object sweep's worker does, so the two can be compared on the same gateway
// and the same objects: PUT one random body to every key, or GET every key and drop the bytes, with
// -concurrency requests in flight. Keys come on stdin (one per line), credentials in the environment
// (STORAGEBRIEF_S3_ACCESS / STORAGEBRIEF_S3_SECRET; never argv). It prints 'ready' once the client and body
// are made, waits for a line 'go' on stdin, then runs the batch and prints one JSON line: objects, bytes_moved,
// wall_seconds (first request sent to last completed) and client_cpu_seconds (this process's user + system
// CPU over the batch, every thread: getrusage).
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return -1
	}
	return float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
}

func fail(format string, args ...any) {
	msg, _ := json.Marshal(map[string]string{"error": fmt.Sprintf(format, args...)})
	fmt.Println(string(msg))
	os.Exit(0)
}

func main() {
	endpoint := flag.String("endpoint", "", "http://host:port of the S3 endpoint")
	bucket := flag.String("bucket", "", "bucket")
	op := flag.String("op", "get", "get | put")
	size := flag.Int64("size", 0, "object size in bytes (a PUT's body; a GET's expected size)")
	concurrency := flag.Int("concurrency", 8, "requests in flight")
	region := flag.String("region", "us-east-1", "region")
	flag.Parse()
	if *op != "get" && *op != "put" {
		fail("-op is %q; allowed: get, put", *op)
	}
	if *concurrency < 1 || *size < 1 {
		fail("-concurrency %d and -size %d must be >= 1", *concurrency, *size)
	}
	u, err := url.Parse(*endpoint)
	if err != nil || u.Host == "" {
		fail("-endpoint %q is not a URL like http://127.0.0.1:7070", *endpoint)
	}
	in := bufio.NewReader(os.Stdin)
	var keys []string
	for {
		line, err := in.ReadString('\n')
		line = strings.TrimSpace(line)
		if line == "" || err != nil {
			break
		}
		keys = append(keys, line)
	}
	transport, err := minio.DefaultTransport(u.Scheme == "https")
	if err != nil {
		fail("transport: %v", err)
	}
	// one connection per request in flight, as the Python worker's pool has
	transport.MaxIdleConnsPerHost = *concurrency
	transport.MaxConnsPerHost = *concurrency
	client, err := minio.New(u.Host, &minio.Options{
		Creds:     credentials.NewStaticV4(os.Getenv("STORAGEBRIEF_S3_ACCESS"), os.Getenv("STORAGEBRIEF_S3_SECRET"), ""),
		Secure:    u.Scheme == "https",
		Region:    *region,
		Transport: transport,
	})
	if err != nil {
		fail("client: %v", err)
	}
	var body []byte
	if *op == "put" {
		body = make([]byte, *size)
		rand.New(rand.NewSource(1)).Read(body)
	}
	fmt.Println("ready")
	if line, _ := in.ReadString('\n'); strings.TrimSpace(line) != "go" {
		os.Exit(1)
	}

	ctx := context.Background()
	var next, moved int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	cpu0, t0 := cpuSeconds(), time.Now()
	for w := 0; w < *concurrency; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := atomic.AddInt64(&next, 1) - 1
				if i >= int64(len(keys)) || firstErr.Load() != nil {
					return
				}
				if *op == "put" {
					_, err := client.PutObject(ctx, *bucket, keys[i], bytes.NewReader(body), *size,
						minio.PutObjectOptions{ContentType: "application/octet-stream"})
					if err != nil {
						firstErr.CompareAndSwap(nil, fmt.Sprintf("PUT %s: %v", keys[i], err))
						return
					}
					atomic.AddInt64(&moved, *size)
				} else {
					obj, err := client.GetObject(ctx, *bucket, keys[i], minio.GetObjectOptions{})
					if err == nil {
						var n int64
						n, err = io.Copy(io.Discard, obj)
						obj.Close()
						atomic.AddInt64(&moved, n)
					}
					if err != nil {
						firstErr.CompareAndSwap(nil, fmt.Sprintf("GET %s: %v", keys[i], err))
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	wall, cpu := time.Since(t0).Seconds(), cpuSeconds()-cpu0
	if e := firstErr.Load(); e != nil {
		fail("%s", e)
	}
	out, _ := json.Marshal(map[string]any{"objects": len(keys), "bytes_moved": moved, "wall_seconds": wall,
		"client_cpu_seconds": cpu})
	fmt.Println(string(out))
}
