// spawn.go - Go side of the spawn+exit micro-benchmark (bench/tasks/spawn.c):
// the main goroutine starts N goroutines that each call wg.Done (after
// touching `touch` bytes of stack, 0 by default) and waits for them all.
// ns_per_op is the elapsed time divided by N; minflt_per_op counts the page
// faults taken per spawn (getrusage).
//
// usage: spawn [N] [touch_bytes: 0 | 1024 | 16384]
package main

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"
)


//go:noinline
func sink(b []byte) byte { return b[0] + b[len(b)-1] }

//go:noinline
func use1k() byte {
	var buf [1 << 10]byte
	buf[0], buf[len(buf)-1] = 1, 1
	return sink(buf[:])
}

//go:noinline
func use16k() byte {
	var buf [16 << 10]byte
	buf[0], buf[len(buf)-1] = 1, 1
	return sink(buf[:])
}

func minflt() int64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Minflt
}

func spawnWait(n, touch int) {
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			switch touch {
			case 1024:
				_ = use1k()
			case 16384:
				_ = use16k()
			}
			wg.Done()
		}()
	}
	wg.Wait()
}

func run(n, touch, batch int) time.Duration {
	start := time.Now()
	if batch <= 0 {
		spawnWait(n, touch)
	} else {
		for i := 0; i < n; i += batch {
			b := batch
			if n-i < b {
				b = n - i
			}
			spawnWait(b, touch)
		}
	}
	return time.Since(start)
}

func main() {
	n := 1000000
	touch, batch := 0, 0
	if len(os.Args) > 1 {
		n, _ = strconv.Atoi(os.Args[1])
	}
	if len(os.Args) > 2 {
		touch, _ = strconv.Atoi(os.Args[2])
	}
	if len(os.Args) > 3 {
		batch, _ = strconv.Atoi(os.Args[3])
	}
	name := "spawn"
	switch touch {
	case 1024:
		name = "spawn_1k"
	case 16384:
		name = "spawn_16k"
	}
	run(n/10, touch, batch) // warm-up
	f0 := minflt()
	d := run(n, touch, batch)
	f := minflt() - f0
	fmt.Printf("name=%s impl=go workers=%d ns_per_op=%.2f minflt_per_op=%.4f iters=%d batch=%d\n",
		name, runtime.GOMAXPROCS(0), float64(d.Nanoseconds())/float64(n), float64(f)/float64(n), n, batch)
}
