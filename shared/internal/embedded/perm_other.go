//go:build !unix

package embedded

import "io/fs"

// modesGuard reports that file modes decide which users reach the data
// directory and its control socket: not here (Windows reports synthesized
// modes; its access control lists decide).
const modesGuard = false

// ownedByMe reports whether fi's owner is this process's user: assumed,
// as the mode bits that would say otherwise are not kept here.
func ownedByMe(fs.FileInfo) bool { return true }
