"""The paper's analyses (Shleifer, Weston & Ott 2021, §4.1, Figures 3–7): gradient norms by layer
(``grads``), learned NormFormer gains by layer (``gains``) and the increasing-LR stability test
(``stability``). ``cli`` is the ``nfeval analyze`` command over them."""
