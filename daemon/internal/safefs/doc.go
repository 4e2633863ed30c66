// Package safefs is how the daemon, outside every jail and usually as root,
// touches a directory a jailed process can write: a server's home (HOME,
// caches, TMPDIR, the Go module cache, overlay files), and anything below
// it. Such a directory may hold links the jail planted, and may change
// while the daemon works in it, so a path string into it means nothing:
// "home/.config/go/telemetry/mode" may name /etc/shadow by the time the
// daemon opens it.
//
// So every operation here starts from a directory the caller trusts (a path
// only the daemon can change: its own root, a home's parent) opened
// without following a final link, and goes down one component at a time
// through descriptors: openat2(2) with RESOLVE_BENEATH and
// RESOLVE_NO_SYMLINKS for every descent, mkdirat/unlinkat/renameat/
// fchownat relative to an open directory, never an operation that follows
// a link in its last component. Files are written by a new name and renamed
// over the old one, so a planted link (or a hard link to another file) is
// replaced, never written through; ownership is given with fchown on the
// daemon's own descriptor or fchownat without following, and never to a
// file with more than one link. Where openat2 is unavailable (ENOSYS, a
// kernel before 5.6, or a seccomp filter) every operation fails: there is
// no fallback that would follow. Reads are bounded and take regular files
// only; an entry staged where only the daemon writes moves in by renameat
// (MoveIn), keeping a directory already there.
//
// This is the one place that writes, reads, walks or removes in such a
// directory: the home's layout (runtime.PrepareHome), its hand-over to a
// jail uid, the dependency phase's module cache and overlays, the
// disk-usage walk (StatTree) and removal all go through it. The walks
// hold a bounded number of descriptors whatever the depth: a jail can
// nest directories far deeper than any path can name. They read a
// directory a bounded batch of names at a time (readBatch), never whole:
// a jail can put millions of entries in one.
//
// Dir.Path names an open directory as /proc/self/fd/N for code that takes
// paths (the module zip extractor): the kernel resolves it to exactly that
// directory, whatever was renamed or linked above it since. Such a path is
// safe only for operations on the directory's direct children that do not
// follow their last component (create exclusive, rename, unlink) or for a
// directory only the daemon can write.
package safefs
