// seed.go - the seed experiment (seeds 000/002) in Go, beside bench/seed/seed.c.
//
// Spawns N goroutines; each optionally calls a function with an 8 KiB or
// 64 KiB local once, then parks on a channel.  Reports spawn time (until every
// goroutine has reached its park), StackInuse, RSS/HWM/page tables from
// /proc/self/status, then samples RSS every 100 ms for settle_ms with no GC
// (Go shrinks stacks only in a GC), then forces 6 GCs and reports after each,
// then releases the goroutines.  Output: key=value lines read by
// bench/report/report.py.
//
// usage: seed N idle|8k|64k [settle_ms]
// env:   BENCH_MEM_GUARD  stop spawning when VmRSS exceeds this many bytes
package main

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

//go:noinline
func sink(b []byte) byte { return b[0] + b[len(b)-1] }

// A frame with an 8 KiB local; the slice goes to a noinline sink so the
// compiler cannot drop the array.
//
//go:noinline
func touch8() byte {
	var buf [8 << 10]byte
	buf[0], buf[len(buf)-1] = 1, 1
	return sink(buf[:])
}

//go:noinline
func touch64() byte {
	var buf [64 << 10]byte
	buf[0], buf[len(buf)-1] = 1, 1
	return sink(buf[:])
}

var sinkv uint32

// status returns VmRSS, VmHWM and VmPTE in bytes, read from the kernel.
func status() (rss, hwm, pte int64) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 2 {
			continue
		}
		v, _ := strconv.ParseInt(fs[1], 10, 64)
		switch fs[0] {
		case "VmRSS:":
			rss = v << 10
		case "VmHWM:":
			hwm = v << 10
		case "VmPTE:":
			pte = v << 10
		}
	}
	return
}

func maxrss() int64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Maxrss << 10
}

func minflt() int64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Minflt
}

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: seed N idle|8k|64k [settle_ms]")
		os.Exit(2)
	}
	n, _ := strconv.Atoi(os.Args[1])
	mode := os.Args[2]
	settle := 1500
	if len(os.Args) > 3 {
		settle, _ = strconv.Atoi(os.Args[3])
	}
	guard := int64(20 << 30)
	if g := os.Getenv("BENCH_MEM_GUARD"); g != "" {
		guard, _ = strconv.ParseInt(g, 10, 64)
	}
	gogc := os.Getenv("GOGC")
	if gogc == "" {
		gogc = "100"
	}
	tag := fmt.Sprintf("impl=go n=%d mode=%s gogc=%s workers=%d", n, mode, gogc, runtime.GOMAXPROCS(0))

	var wg sync.WaitGroup
	var parked int64
	block := make(chan struct{})
	flt0 := minflt()
	start := time.Now()
	spawned := 0
	guardHit := false
	for i := 0; i < n; i++ {
		if i&8191 == 8191 {
			if rss, _, _ := status(); rss > guard {
				guardHit = true
				break
			}
		}
		wg.Add(1)
		spawned++
		go func() {
			defer wg.Done()
			switch mode {
			case "8k":
				atomic.AddUint32(&sinkv, uint32(touch8()))
			case "64k":
				atomic.AddUint32(&sinkv, uint32(touch64()))
			}
			atomic.AddInt64(&parked, 1)
			<-block
		}()
	}
	for atomic.LoadInt64(&parked) < int64(spawned) {
		time.Sleep(time.Millisecond)
	}
	// Every goroutine has passed its counter; give the last ones a moment
	// to reach the channel receive.
	for runtime.NumGoroutine() < spawned+1 {
		time.Sleep(time.Millisecond)
	}
	spawnDur := time.Since(start)
	flt := minflt() - flt0
	t0 := time.Now()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	rss, hwm, pte := status()
	g := ""
	if guardHit {
		g = " guard=hit"
	}
	fmt.Printf("kind=seed %s phase=parked spawned=%d spawn_ms=%.1f tasks=%d stack_inuse=%d heap_inuse=%d sys=%d rss=%d hwm=%d pte=%d minflt=%d%s\n",
		tag, spawned, float64(spawnDur.Nanoseconds())/1e6, runtime.NumGoroutine()-1,
		m.StackInuse, m.HeapInuse, m.Sys, rss, hwm, pte, flt, g)
	// Settling with no GC: Go never shrinks a stack outside a GC.
	for t := 100; t <= settle; t += 100 {
		time.Sleep(time.Until(t0.Add(time.Duration(t) * time.Millisecond)))
		runtime.ReadMemStats(&m)
		rss, _, pte = status()
		fmt.Printf("kind=seedt %s event=sample t_ms=%d rss=%d pte=%d stack=%d\n",
			tag, int(time.Since(t0).Milliseconds()), rss, pte, m.StackInuse)
	}
	for i := 1; i <= 6; i++ {
		g0 := time.Now()
		runtime.GC()
		gcMs := float64(time.Since(g0).Nanoseconds()) / 1e6
		runtime.ReadMemStats(&m)
		rss, _, pte = status()
		fmt.Printf("kind=seedt %s event=gc%d t_ms=%d gc_ms=%.1f rss=%d pte=%d stack=%d heap_inuse=%d sys=%d\n",
			tag, i, int(time.Since(t0).Milliseconds()), gcMs, rss, pte, m.StackInuse, m.HeapInuse, m.Sys)
	}
	rss, _, pte = status()
	fmt.Printf("kind=seed %s phase=settled rss=%d pte=%d stack_inuse=%d\n", tag, rss, pte, m.StackInuse)
	r0 := time.Now()
	close(block)
	wg.Wait()
	relDur := time.Since(r0)
	runtime.GC()
	debug.FreeOSMemory()
	rss, _, pte = status()
	fmt.Printf("kind=seed %s phase=released release_ms=%.1f rss=%d pte=%d maxrss=%d sink=%d\n",
		tag, float64(relDur.Nanoseconds())/1e6, rss, pte, maxrss(), atomic.LoadUint32(&sinkv)&1)
}
