"""Reading a model's structure: hyper-parameters, tensor index, quant recipes (pure)."""
