package players

// AuthenticateSQL is the statement every API request runs, for its plan test.
const AuthenticateSQL = authenticateSQL
