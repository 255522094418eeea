import pytest

from trainsim.errors import TrainsimError
from trainsim.plan import TOKENS_PER_PARAM, chinchilla_point, chinchilla_tokens, make_budget

A100_BF16 = 312e12


def test_vtrain_table_iii_naive_point():
    # 3,360 A100 for 30 days at 100 % utilization: C ≈ 2.72e24 FLOP, N ≈ 146.7B parameters, T ≈ 3.09T tokens
    b = make_budget(3360, A100_BF16, 2.0, days=30)
    assert b.compute_flops == pytest.approx(3360 * 312e12 * 30 * 86400)
    n, t = chinchilla_point(b.compute_flops)
    assert n == pytest.approx(146.7e9, rel=1e-3) and t == pytest.approx(3.091e12, rel=1e-3)
    assert 6 * n * t == pytest.approx(b.compute_flops, rel=0.01)  # the two coefficients are consistent with C = 6NT
    assert chinchilla_tokens(n) == pytest.approx(t) and pytest.approx(21.07, abs=0.01) == TOKENS_PER_PARAM


def test_dollar_budget_and_the_tighter_limit():
    b = make_budget(1000, A100_BF16, 2.0, budget_usd=960_000)
    assert b.days == pytest.approx(20) and b.limited_by == "budget" and b.cost_usd == pytest.approx(960_000)
    b = make_budget(1000, A100_BF16, 2.0, days=10, budget_usd=960_000)
    assert b.days == 10 and b.limited_by == "days"
    b = make_budget(1000, A100_BF16, 2.0, days=30, budget_usd=960_000)
    assert b.days == pytest.approx(20) and b.limited_by == "budget"
    assert b.to_dict()["gpu_hours"] == pytest.approx(480_000)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"num_gpus": 0, "days": 1}, "num_gpus"),
        ({"num_gpus": 8}, "days"),
        ({"num_gpus": 8, "days": -1}, "days"),
        ({"num_gpus": 8, "budget_usd": 0}, "budget_usd"),
        ({"num_gpus": 8, "budget_usd": 10, "price": 0}, "price_per_gpu_hour"),
    ],
)
def test_budget_errors(kwargs, field):
    price = kwargs.pop("price", 2.0)
    with pytest.raises(TrainsimError) as exc:
        make_budget(peak_flops_per_gpu=A100_BF16, price_per_gpu_hour=price, **kwargs)
    assert exc.value.field == field
