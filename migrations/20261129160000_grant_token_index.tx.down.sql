DROP INDEX IF EXISTS rider_grants_token;
