package check

// LockKey is the key whose lock the workers of a check contend for (under
// the store's key prefix).
const LockKey = lockKey
