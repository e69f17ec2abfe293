// serve: the S3 data path of a study's worker process (core/s3mover.py): an emulated accelerator's loader threads
// send it their GETs and read back counts, so that no byte of a sample becomes a Python object and no request goes
// through boto3. Its configuration is {"op": "serve", "concurrency": connections, "store": {"s3": ...}}; then, one
// JSON line each, any number of commands in flight at once, each answered by {"event": "reply", "id": ...}:
//
//	{"cmd": "head", "id": n, "key": k}                 the object's size ("bytes"): opens a connection
//	{"cmd": "read", "id": n, "block": b, "parallel": p, "spans": [{"k": key, "o": offset, "n": length, "w": whole}]}
//	    every span one GET (ranged unless whole), its body read in `block`-byte reads and dropped, `parallel` spans
//	    at once; "bytes": the bytes received, "latencies_s": every block read's seconds (a span's first includes its
//	    request's round trip), spans in order. A body shorter or longer than its span fails the command.
//	{"cmd": "body", "id": n, "bytes": b, "seed": s}   makes the body uploads send: b incompressible bytes, once
//	{"cmd": "upload", "id": n, "key": k, "bytes": total, "part": p, "kill_pid": pid}
//	    one multipart upload of `total` bytes in parts of `p` (each the body's first p bytes), the parts one after
//	    another; "bytes", "parts", "seconds" (create to completed upload), "part_seconds"; a failed upload is
//	    aborted. kill_pid (a test hook): that process is sent SIGKILL once the first part is stored.
//
// A failed command answers {"event": "reply", "id": n, "error": "..."}; the process goes on serving.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/minio/minio-go/v7"
)

type span struct {
	Key    string `json:"k"`
	Offset int64  `json:"o"`
	Length int64  `json:"n"`
	Whole  bool   `json:"w"`
}

type command struct {
	Cmd      string `json:"cmd"`
	ID       int64  `json:"id"`
	Key      string `json:"key"`
	Block    int64  `json:"block"`
	Parallel int    `json:"parallel"`
	Spans    []span `json:"spans"`
	Bytes    int64  `json:"bytes"`
	Seed     int64  `json:"seed"`
	Part     int64  `json:"part"`
	KillPID  int    `json:"kill_pid"`
}

var sayMu sync.Mutex // replies from many goroutines, one whole line each

func reply(event map[string]any) {
	sayMu.Lock()
	defer sayMu.Unlock()
	say(event)
}

// up to n bytes of r read into buf (reused: a block may be larger than buf) and dropped
func drain(r io.Reader, n int64, buf []byte) (int64, error) {
	var got int64
	for got < n {
		m, err := r.Read(buf[:min(int64(len(buf)), n-got)])
		got += int64(m)
		if err != nil {
			return got, err
		}
	}
	return got, nil
}

// one span read in block-byte reads: its bytes and every block read's seconds
func readSpan(ctx context.Context, client *minio.Client, bucket string, s span, block int64) (int64, []float64, error) {
	opts := minio.GetObjectOptions{}
	if !s.Whole {
		if err := opts.SetRange(s.Offset, s.Offset+s.Length-1); err != nil {
			return 0, nil, err
		}
	}
	bp := buffers.Get().(*[]byte)
	defer buffers.Put(bp)
	t0 := time.Now()
	obj, err := client.GetObject(ctx, bucket, s.Key, opts) // the request goes out on the first read
	if err != nil {
		return 0, nil, err
	}
	defer obj.Close()
	lats := make([]float64, 0, 1+s.Length/block)
	var got int64
	for got < s.Length {
		m, err := drain(obj, min(block, s.Length-got), *bp)
		got += m
		if m > 0 {
			lats = append(lats, time.Since(t0).Seconds())
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return got, lats, err
		}
		t0 = time.Now()
	}
	if got == s.Length { // nothing may follow the span's bytes
		if m, _ := drain(obj, 1, *bp); m > 0 {
			return got + m, lats, fmt.Errorf("more than the %d bytes asked for", s.Length)
		}
	}
	if got != s.Length {
		return got, lats, fmt.Errorf("received %d of %d bytes: a short body is not a whole span", got, s.Length)
	}
	return got, lats, nil
}

func readSpans(client *minio.Client, bucket string, c *command) map[string]any {
	if c.Block < 1 || c.Parallel < 1 {
		return map[string]any{"event": "reply", "id": c.ID, "error": fmt.Sprintf(
			"read: block %d and parallel %d (both >= 1)", c.Block, c.Parallel)}
	}
	ctx := context.Background()
	lats := make([][]float64, len(c.Spans))
	var moved int64
	err := eachOf(len(c.Spans), c.Parallel, func(i int) error {
		s := c.Spans[i]
		n, l, err := readSpan(ctx, client, bucket, s, c.Block)
		if err != nil {
			return fmt.Errorf("GET s3 %s bytes %d+%d: %v", s.Key, s.Offset, s.Length, err)
		}
		lats[i] = l
		atomic.AddInt64(&moved, n)
		return nil
	})
	if err != nil {
		return map[string]any{"event": "reply", "id": c.ID, "error": err.Error()}
	}
	all := make([]float64, 0, len(c.Spans))
	for _, l := range lats {
		all = append(all, l...)
	}
	return map[string]any{"event": "reply", "id": c.ID, "bytes": moved, "latencies_s": all}
}

func head(client *minio.Client, bucket string, c *command) map[string]any {
	info, err := client.StatObject(context.Background(), bucket, c.Key, minio.StatObjectOptions{})
	if err != nil {
		return map[string]any{"event": "reply", "id": c.ID, "error": fmt.Sprintf("HEAD s3 %s: %v", c.Key, err)}
	}
	return map[string]any{"event": "reply", "id": c.ID, "bytes": info.Size}
}

// serve answers commands until "exit" or the end of stdin; each command runs in a goroutine of its own
func serve(lines func() ([]byte, error), client *minio.Client, bucket string) {
	say(map[string]any{"event": "ready"})
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		line, err := lines()
		var c command
		if err != nil || json.Unmarshal(line, &c) != nil || c.Cmd == "exit" {
			return
		}
		wg.Add(1)
		go func(c command) {
			defer wg.Done()
			switch c.Cmd {
			case "read":
				reply(readSpans(client, bucket, &c))
			case "head":
				reply(head(client, bucket, &c))
			case "body":
				reply(makeBody(&c))
			case "upload":
				reply(upload(client, bucket, &c))
			default:
				reply(map[string]any{"event": "reply", "id": c.ID, "error": fmt.Sprintf(
					"unknown command %q (allowed: head, read, body, upload, exit)", c.Cmd)})
			}
		}(c)
	}
}

var body []byte // what uploads send ("body"), made before any clock

func makeBody(c *command) map[string]any {
	if c.Bytes < 1 {
		return map[string]any{"event": "reply", "id": c.ID, "error": fmt.Sprintf("body: bytes %d (>= 1)", c.Bytes)}
	}
	b := make([]byte, c.Bytes)
	rand.New(rand.NewSource(c.Seed)).Read(b) // random: incompressible
	body = b
	return map[string]any{"event": "reply", "id": c.ID, "bytes": len(b)}
}

func upload(client *minio.Client, bucket string, c *command) map[string]any {
	fail := func(err error) map[string]any {
		return map[string]any{"event": "reply", "id": c.ID, "error": fmt.Sprintf("upload s3 %s: %v", c.Key, err)}
	}
	if c.Part < 1 || c.Bytes < 1 || int64(len(body)) < min(c.Part, c.Bytes) {
		return fail(fmt.Errorf("bytes %d and part %d (>= 1, a body of at least one part made first: %d bytes)",
			c.Bytes, c.Part, len(body)))
	}
	ctx, core := context.Background(), minio.Core{Client: client}
	t0 := time.Now()
	// each part checked as a single PUT is (main.go putOptions): its CRC32C in a header, the payload unsigned
	id, err := core.NewMultipartUpload(ctx, bucket, c.Key, minio.PutObjectOptions{ContentType: "application/octet-stream",
		UserMetadata: map[string]string{"x-amz-checksum-algorithm": "CRC32C"}})
	if err != nil {
		return fail(err)
	}
	var parts []minio.CompletePart
	var times []float64
	var sent int64
	for n := 1; sent < c.Bytes; n++ {
		size := min(c.Part, c.Bytes-sent)
		p0 := time.Now()
		crc := crc32c(body[:size])
		part, err := core.PutObjectPart(ctx, bucket, c.Key, id, n, bytes.NewReader(body[:size]), size,
			minio.PutObjectPartOptions{DisableContentSha256: true,
				CustomHeader: http.Header{"X-Amz-Checksum-Crc32c": []string{crc}}})
		if err != nil {
			core.AbortMultipartUpload(ctx, bucket, c.Key, id)
			return fail(err)
		}
		times = append(times, time.Since(p0).Seconds())
		parts = append(parts, minio.CompletePart{PartNumber: n, ETag: part.ETag, ChecksumCRC32C: crc})
		sent += size
		if c.KillPID > 0 && n == 1 {
			syscall.Kill(c.KillPID, syscall.SIGKILL)
		}
	}
	if _, err := core.CompleteMultipartUpload(ctx, bucket, c.Key, id, parts, minio.PutObjectOptions{}); err != nil {
		core.AbortMultipartUpload(ctx, bucket, c.Key, id)
		return fail(err)
	}
	return map[string]any{"event": "reply", "id": c.ID, "bytes": sent, "parts": len(parts),
		"seconds": time.Since(t0).Seconds(), "part_seconds": times}
}
