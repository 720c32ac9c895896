"""linear_resnet: paper 003 (Zou, Long & Gu, "On the Global Convergence of Training Deep Linear
ResNets", ICLR 2020). Modules: params (the schema), data and transforms (the problem), model (closed
-form loss and gradients), flops (cost model), theory (the theorems' expressions), train (GD/SGD
loops), task (the Task protocol)."""
