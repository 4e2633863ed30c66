// Package lsp is the daemon's client for language servers: a small typed
// layer over package jsonrpc covering the part of the Language Server
// Protocol the daemon uses, hand-written rather than generated.
//
// The types here are the daemon's normalised view, not the wire shapes. The
// protocol allows several shapes for most answers (a Location, a list of them
// or a list of LocationLinks; hover contents as MarkupContent, MarkedString or
// a list of MarkedStrings; hierarchical DocumentSymbols or flat
// SymbolInformation), and every method folds them into one form.
//
// Everything a server sends is untrusted. Lists are decoded element by
// element and stop at Limits.MaxItems (the answer says Truncated); elements
// that do not have the expected shape are skipped and counted in Dropped;
// markdown is cut at Limits.MaxMarkdownBytes; logs, published diagnostics,
// progress tokens and dynamic registrations are kept in bounded structures.
// No shape a server can produce makes a method panic.
//
// Only capabilities the server actually negotiated (in its initialize answer
// or later through client/registerCapability) become tools; a method whose
// capability is missing fails with ErrCapabilityUnavailable without asking
// the server.
package lsp
