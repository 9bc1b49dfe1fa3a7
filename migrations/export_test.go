package migrations

// LockKey is the migration lock's id, for tests that hold it.
const LockKey = lockKey
