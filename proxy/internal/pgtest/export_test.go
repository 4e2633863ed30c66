package pgtest

var WithDatabase = withDatabase
