-- A restricted token's live grants are counted at each grant it asks for
-- (at most 5): by token, not by scanning every grant of the account.
CREATE INDEX rider_grants_token ON rider_grants (account_id, token_id, not_after);
