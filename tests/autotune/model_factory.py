"""A tiny model for ``tdsl tune-model`` tests: ``factory() -> (model, example_inputs)``."""
import torch


class MLP(torch.nn.Module):
    """Four dense layers, the two middle ones the same shape (one task of weight 2)."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(12, 20)
        self.b = torch.nn.Linear(20, 20)
        self.c = torch.nn.Linear(20, 20)
        self.d = torch.nn.Linear(20, 6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.a(x))
        x = torch.relu(self.b(x))
        x = torch.relu(self.c(x))
        return self.d(x)


def factory():
    torch.manual_seed(0)
    return MLP().eval(), (torch.randn(5, 12),)
