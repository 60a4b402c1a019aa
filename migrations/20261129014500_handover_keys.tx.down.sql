DROP TABLE handover_keys;
