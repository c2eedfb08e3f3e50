"""Reading result files of every version aorta (and the upstream tool) wrote: validate, then upgrade.

Above ops: upgrading a schema-v1 file recomputes its switch analysis from the stored op rows.
"""
