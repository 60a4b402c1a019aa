DROP TABLE event_account_horizons;
