package bunstore

// SetRevokeChunk makes RevokeGrants revoke on n mounts per transaction
// until the returned func restores the default.
func SetRevokeChunk(n int) (restore func()) {
	before := revokeChunk
	revokeChunk = n
	return func() { revokeChunk = before }
}
