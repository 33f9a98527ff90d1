// Package repo has no code: its tests hold the repository itself to what a
// fresh clone should be (no build outputs or other large files in git).
package repo
