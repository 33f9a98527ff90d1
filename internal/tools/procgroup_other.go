//go:build !unix

package tools

import "os/exec"

// ownGroup leaves cmd as it is where process groups do not exist: its
// context's cancellation kills the command itself.
func ownGroup(*exec.Cmd) {}

// killGroup has no group to kill.
func killGroup(*exec.Cmd) {}
