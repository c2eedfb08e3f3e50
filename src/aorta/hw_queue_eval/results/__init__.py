"""The run-result file: schema, save and load, validation, upgrade of older versions."""
