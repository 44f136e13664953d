// bigfree.go - seed 003's scenario in Go, for the free-then-idle timeline of
// bench/results/REPORT.md: allocate a lot, drop it, then idle while RSS is
// sampled every 100 ms (read from /proc/self/status).
//
// Scenarios:
//   big   - the seed's program: a function with a huge array local (which
//           Go moves to the heap) called 3 times (total/3 bytes each);
//           every page is written.
//   mixed - like the allocator benchmark's free-then-idle: 4 goroutines
//           allocate `total` bytes in mixed sizes (16 B - 64 KiB), all of it
//           is dropped.
// In both, "free" is dropping the references and one runtime.GC() (Go's
// equivalent of free); after that the program makes no call at all.
//
// usage: bigfree big|mixed [total_bytes] [idle_ms]
package main

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
)

func rss() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) >= 2 && fs[0] == "VmRSS:" {
			v, _ := strconv.ParseInt(fs[1], 10, 64)
			return v << 10
		}
	}
	return 0
}

var keep [][]byte

//go:noinline
func doFloat(n int) {
	tmp := make([]float64, n)
	for i := 0; i < n; i += 512 { // one write per 4 KiB page
		tmp[i] = float64(i)
	}
	keep = append(keep, nil) // prevent the loop from being proven dead
	if tmp[n-1] != 0 {
		fmt.Println("unreachable")
	}
}

func mixed(total int64) {
	var wg sync.WaitGroup
	per := total / 4
	res := make([][][]byte, 4)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			seed := uint64(g)*0x9E3779B97F4A7C15 + 1
			var got int64
			var out [][]byte
			for got < per {
				seed ^= seed << 13
				seed ^= seed >> 7
				seed ^= seed << 17
				sz := 16 << (seed % 13) // 16 B .. 64 KiB
				sz += int(seed>>8) % sz
				b := make([]byte, sz)
				for i := 0; i < sz; i += 4096 {
					b[i] = 1
				}
				b[sz-1] = 1
				out = append(out, b)
				got += int64(sz)
			}
			res[g] = out
		}(g)
	}
	wg.Wait()
	keep = nil
	res = nil
}

func main() {
	scenario := "mixed"
	total := int64(2 << 30)
	idle := 3000
	if len(os.Args) > 1 {
		scenario = os.Args[1]
	}
	if len(os.Args) > 2 {
		total, _ = strconv.ParseInt(os.Args[2], 10, 64)
	}
	if len(os.Args) > 3 {
		idle, _ = strconv.Atoi(os.Args[3])
	}
	tag := fmt.Sprintf("impl=go scenario=%s total=%d", scenario, total)
	switch scenario {
	case "big":
		for i := 0; i < 3; i++ { // three arrays of total/3 bytes, one at a time
			doFloat(int(total / 24))
		}
	default:
		mixed(total)
	}
	peak := rss()
	runtime.GC() // the "free"
	t0 := time.Now()
	fmt.Printf("kind=idle %s t_ms=0 rss=%d peak=%d\n", tag, rss(), peak)
	for t := 100; t <= idle; t += 100 {
		time.Sleep(time.Until(t0.Add(time.Duration(t) * time.Millisecond)))
		fmt.Printf("kind=idle %s t_ms=%d rss=%d\n", tag, int(time.Since(t0).Milliseconds()), rss())
	}
}
