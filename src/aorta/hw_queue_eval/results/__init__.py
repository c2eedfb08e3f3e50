"""The run-result file: typed models, schema, save, validation (reading files: readers/)."""
