package server

import (
	"bufio"
	"context"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// processCPU returns the CPU time, user and system, this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// redisCPU returns the CPU time, user and system, the Redis server behind
// rdb has used, from INFO cpu.
func redisCPU(ctx context.Context, rdb *redis.Client) (time.Duration, error) {
	info, err := rdb.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, err
	}
	var total float64
	found := 0
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if !ok || (k != "used_cpu_user" && k != "used_cpu_sys") {
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0, fmt.Errorf("INFO cpu %s: %v", k, err)
		}
		total += f
		found++
	}
	if found != 2 {
		return 0, fmt.Errorf("INFO cpu: want used_cpu_user and used_cpu_sys, got %q", info)
	}
	return time.Duration(total * float64(time.Second)), nil
}

// cpuCost is what one side of a side-by-side benchmark spent: the CPU
// time of this process (server and clients, or the Redis clients) and of
// the Redis server, per completed cycle. Unlike a rate, it hardly depends
// on what else the machine runs.
type cpuCost struct {
	process, redis time.Duration
	cycles         float64
}

// measureCPU runs fn, which returns its cycles per second over d, and
// returns the rate and the CPU it cost; with rdb it also counts the Redis
// server's CPU.
func measureCPU(ctx context.Context, rdb *redis.Client, d time.Duration, fn func() float64) (float64, cpuCost, error) {
	var r0 time.Duration
	var err error
	if rdb != nil {
		if r0, err = redisCPU(ctx, rdb); err != nil {
			return 0, cpuCost{}, err
		}
	}
	p0 := processCPU()
	rate := fn()
	c := cpuCost{process: processCPU() - p0, cycles: rate * d.Seconds()}
	if rdb != nil {
		r1, err := redisCPU(ctx, rdb)
		if err != nil {
			return 0, cpuCost{}, err
		}
		c.redis = r1 - r0
	}
	return rate, c, nil
}

// perCycle is the CPU time per cycle, in microseconds.
func (c cpuCost) perCycle() float64 {
	if c.cycles == 0 {
		return 0
	}
	return float64(c.process+c.redis) / float64(time.Microsecond) / c.cycles
}
