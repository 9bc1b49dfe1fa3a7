package timeline

// ValidID returns ErrInvalidID for an id no provider can have sent (NUL,
// invalid UTF-8), else nil.
func ValidID(id string) error { return checkText("payment id", id) }
