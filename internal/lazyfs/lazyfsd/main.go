// Command lazyfsd serves the forgetful filesystem (internal/lazyfs) as a
// process of its own, for tests that pull the power on the processes using
// it. Built without the race detector, it does not slow their disk down.
//
//	lazyfsd --backing DIR --mount DIR [--stats FILE]
//
// It prints "mounted" once the filesystem is mounted, then answers signals,
// each with a line once done:
//
//	SIGUSR1           crash: drop every unsynced byte, fail every operation ("crashed")
//	SIGUSR2           write the fsyncs of each file and directory, as JSON, to the stats file ("stats")
//	SIGTERM, SIGINT   unmount and exit
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/jetloop/jetloop/internal/lazyfs"
)

func main() {
	backing := flag.String("backing", "", "the directory the filesystem keeps its synced data in")
	mount := flag.String("mount", "", "where to mount it")
	stats := flag.String("stats", "", "where SIGUSR2 writes the fsyncs of each file")
	flag.Parse()
	if *backing == "" || *mount == "" {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*backing, *mount, *stats); err != nil {
		fmt.Fprintln(os.Stderr, "lazyfsd:", err)
		os.Exit(1)
	}
}

func run(backing, mount, stats string) error {
	// Registered before the mount, so no signal is missed once it is there.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGTERM, syscall.SIGINT)
	fs, err := lazyfs.Mount(backing, mount)
	if err != nil {
		return err
	}
	fmt.Println("mounted")
	for sig := range sigs {
		switch sig {
		case syscall.SIGUSR1:
			fs.Crash()
			fmt.Println("crashed")
		case syscall.SIGUSR2:
			if err := writeStats(stats, fs.Fsyncs()); err != nil {
				return err
			}
			fmt.Println("stats")
		default:
			return fs.Unmount()
		}
	}
	return nil
}

// writeStats replaces the stats file whole, so a reader never sees half.
func writeStats(path string, fsyncs map[string]int) error {
	if path == "" {
		return fmt.Errorf("SIGUSR2 without --stats")
	}
	data, err := json.Marshal(fsyncs)
	if err != nil {
		return err
	}
	if err := os.WriteFile(path+".tmp", data, 0o644); err != nil {
		return err
	}
	return os.Rename(path+".tmp", path)
}
