-- Not reversible: the account scoping of history cannot be undone without losing it.
SELECT 1;
