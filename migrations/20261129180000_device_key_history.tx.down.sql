DROP TABLE IF EXISTS mount_device_keys;
