// sleepers.go - Go side of the idle-mostly server (bench/tasks/sleepers.c):
// N goroutines each sleep for a random time (exponential, mean M ms, capped
// at 8 M), wake, touch 256 bytes of state and sleep again, for S seconds.
// Memory is VmRSS + VmPTE sampled every 100 ms after a warm-up of 2 M and
// averaged; CPU is the process's (getrusage) over the same window.
//
// usage: sleepers N mean_ms seconds
package main

import (
	"bufio"
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

func status() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return -1
	}
	defer f.Close()
	var total int64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "VmRSS:") || strings.HasPrefix(line, "VmPTE:") {
			fields := strings.Fields(line)
			if v, err := strconv.ParseInt(fields[1], 10, 64); err == nil {
				total += v << 10
			}
		}
	}
	return total
}

func cpu() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
}

func main() {
	if len(os.Args) < 4 {
		fmt.Fprintln(os.Stderr, "usage: sleepers N mean_ms seconds")
		os.Exit(2)
	}
	n, _ := strconv.Atoi(os.Args[1])
	meanMs, _ := strconv.Atoi(os.Args[2])
	secs, _ := strconv.Atoi(os.Args[3])
	if n <= 0 || meanMs <= 0 || secs <= 0 {
		fmt.Fprintln(os.Stderr, "sleepers: N, mean_ms and seconds must be positive")
		os.Exit(2)
	}
	mean := time.Duration(meanMs) * time.Millisecond
	start := time.Now()
	end := start.Add(time.Duration(secs) * time.Second)
	var wakes int64
	// Lateness histogram, as in sleepers.c: 1 us buckets below 1 ms, then
	// 1 ms buckets to 1 s (no per-goroutine memory).
	var fine [1000]int64
	var coarse [1001]int64
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(id int) {
			defer wg.Done()
			r := rand.New(rand.NewSource(int64(id) + 1))
			var state [256]byte
			for k := range state {
				state[k] = byte(id)
			}
			for time.Now().Before(end) {
				d := time.Duration(r.ExpFloat64() * float64(mean))
				if d > 8*mean {
					d = 8 * mean
				}
				due := time.Now().Add(d)
				time.Sleep(d)
				us := int64(time.Since(due) / time.Microsecond)
				if us < 0 {
					us = 0
				}
				if us < 1000 {
					atomic.AddInt64(&fine[us], 1)
				} else if us/1000 < 1000 {
					atomic.AddInt64(&coarse[us/1000], 1)
				} else {
					atomic.AddInt64(&coarse[1000], 1)
				}
				for k := range state {
					state[k]++
				}
				atomic.AddInt64(&wakes, 1)
			}
		}(i + 1)
	}
	warm := start.Add(2 * mean)
	var sum float64
	var samples int
	var cpu0 float64
	var wakes0 int64
	var tMeas time.Time
	for time.Now().Before(end) {
		time.Sleep(100 * time.Millisecond)
		if time.Now().Before(warm) {
			continue
		}
		if samples == 0 {
			cpu0 = cpu()
			wakes0 = atomic.LoadInt64(&wakes)
			tMeas = time.Now()
		}
		sum += float64(status())
		samples++
	}
	span := time.Since(tMeas).Seconds()
	c := cpu() - cpu0
	w := atomic.LoadInt64(&wakes) - wakes0
	// No wg.Wait: like mote_run when main returns, the program ends with
	// the sleepers still asleep (waiting would add up to 8 M to the run).
	q := func(p float64) float64 {
		var total int64
		for i := range fine {
			total += atomic.LoadInt64(&fine[i])
		}
		for i := range coarse {
			total += atomic.LoadInt64(&coarse[i])
		}
		want, seen := int64(p*float64(total)), int64(0)
		for i := range fine {
			if seen += atomic.LoadInt64(&fine[i]); seen > want {
				return float64(i)
			}
		}
		for i := range coarse {
			if seen += atomic.LoadInt64(&coarse[i]); seen > want {
				return float64(i) * 1000
			}
		}
		return -1
	}
	avg := -1.0
	if samples > 0 {
		avg = sum / float64(samples)
	}
	fmt.Printf("kind=sleepers impl=go n=%d mean_ms=%d freeze=- rss_pt=%.0f per_task=%.0f "+
		"wakes_per_s=%.0f cpu_s_per_s=%.3f cpu_us_per_wake=%.2f late_p50_us=%.0f "+
		"late_p99_us=%.0f freeze_cpu_ms=0 thaws=0 thaw_us=0 frozen_end=0\n",
		n, meanMs, avg, avg/float64(n), float64(w)/span, c/span, c/float64(w)*1e6,
		q(0.5), q(0.99))
}
