"""The XNNPACK delegate blob: header, FlatBuffer graph (`schema/xnnpack.fbs`) and constant data. Torch-free."""
