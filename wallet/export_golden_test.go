package wallet

// Statements exposes the generated post statements, by name, to the
// golden test (package wallet_test).
func Statements() map[string]string {
	return map[string]string{
		"debit":      debitStatement,
		"credit":     creditStatement,
		"conversion": conversionStatement,
		"batch":      batchStatement,
	}
}
