"""The hint ladder of each catalogued mistake (issue 53): three levels, shown one more at a time by
the on-submit service under ``hints = "ladder"`` each time the same student's page shows the same
mistake again (``attnkit.service.policies``); ``full`` pages (``make grade``, ``make check``) show
the catalogue's whole explanation instead.

1. a nudge: which check failed, which concept, which section of the chapter to reread; no fix, no code;
2. the misconception explained: what the code does instead, and why the chapter does otherwise;
3. the fix: what to write.

Keyed by the catalogue's ids (``catalogue.MISTAKES``); each level a msgid of the assignment's domain
(English: ``locale/en/LC_MESSAGES/assignment.po``). Every text must be true for every submission the
id is named for: diagnosis names a mistake by what the code does, not by how it is written.
"""

from __future__ import annotations

from .messages import N_

HINTS: dict[str, tuple[str, str, str]] = {
    "no_scale": (
        N_("「缩放点积注意力」的检查没有通过，问题在「注意力」的分数上：重读第 3 节「为什么除以维数的平方根」，再看看你的 scaled_attention 在 Softmax 之前对点积分数做了什么。"),
        N_("你的分数是未经缩放的点积。d_k 个乘积之和的方差约为 d_k，维数越大分数差得越远，Softmax 就越尖锐，部分梯度也会变小；缩放点积注意力先把分数除以 √d_k，让方差回到 1。"),
        N_("在 Softmax 之前除以键维数的平方根：scores = query @ key.transpose(-2, -1) / sqrt(query.shape[-1])（from math import sqrt）。"),
    ),
    "scale_by_dk": (
        N_("「缩放点积注意力」的检查没有通过，问题在「注意力」的分数缩放上：重读第 3 节，算一算 d_k 个乘积之和的方差，以及要除以什么才能让它回到 1；再数一数你的代码一共缩放了几次。"),
        N_("你的分数一共被除以了 d_k，而不是 √d_k：要么直接除以了 d_k，要么缩放了两次（例如先把查询除以 √d_k，算出分数后又除了一次）。d_k 个独立乘积之和的方差是 d_k，只需除以一次它的平方根（标准差）√d_k，方差就回到 1；除以 d_k 把分数压得过小，权重会过于平均。"),
        N_("只在一处缩放一次：scores = query @ key.transpose(-2, -1) / sqrt(query.shape[-1])（from math import sqrt）；不要除以 query.shape[-1] 本身，也不要在此之外再缩放查询、键或分数。"),
    ),
    "softmax_wrong_axis": (
        N_("「缩放点积注意力」的检查没有通过，问题在「注意力」的归一化上：重读第 4 节「把所有查询一起算」里 Softmax 沿哪个方向计算，再检查你的权重每一行加起来是不是 1。"),
        N_("你的 Softmax 没有沿最后一维（键的维度）计算，而是对别的维度（例如查询、批次或头）归一化。第 4 节的 Softmax 沿每一行计算：固定一个查询，在它能访问的键之间分配权重，所以每一行之和为 1。"),
        N_("沿最后一维做 Softmax：weights = scores.softmax(dim=-1)。用 -1 而不是固定的维度编号，输入有没有批次和头的维度都一样正确。"),
    ),
    "mask_by_multiplying": (
        N_("「带掩码的注意力」的检查没有通过，问题在「用掩码屏蔽」：重读第 5 节图 1 之后的“两种常见错误”，想一想被屏蔽的位置在 Softmax 之后得到多少权重。"),
        N_("你用乘零来“屏蔽”分数。分数为 0 时 exp(0)=1，被屏蔽的位置照样分到概率，还参与分母；第 5 节的因果掩码是加上 -∞，因为 exp(-∞)=0，只有这样被屏蔽的位置才得到零权重。"),
        N_('在 Softmax 之前把不允许的位置的分数设为 -∞：scores = scores.masked_fill(~allowed, float("-inf"))，不要写 scores * allowed。'),
    ),
    "mask_after_softmax": (
        N_("「带掩码的注意力」的检查没有通过，问题在「用掩码屏蔽」：重读第 5 节的“两种常见错误”，检查你的权重每一行加起来是不是 1，被屏蔽的位置是否影响了其他位置的权重。"),
        N_("你在 Softmax 之后才把不允许位置的权重清零，却没有重新归一化：每行之和不再是 1；而且被屏蔽位置的分数已经进了 Softmax 的分母，未来的信息仍然影响了其他位置的权重。"),
        N_('在 Softmax 之前屏蔽分数：scores = scores.masked_fill(~allowed, float("-inf"))，然后 weights = scores.softmax(dim=-1)。'),
    ),
    "mask_inverted": (
        N_("「带掩码的注意力」的检查没有通过，问题在「用掩码屏蔽」：重读第 5 节最后一段“不同库的布尔掩码含义也可能相反”，想一想本章 allowed 为 True 的位置该不该被访问。"),
        N_("你的代码屏蔽掉的是 allowed 为 True 的位置，留下的恰好是不允许访问的位置。本章的 allowed=True 表示“允许访问”（与 PyTorch 的 scaled_dot_product_attention 相同，与 nn.MultiheadAttention 相反），应屏蔽的是 allowed 为 False 的位置。"),
        N_('屏蔽 allowed 为 False 的位置：scores = scores.masked_fill(~allowed, float("-inf"))。'),
    ),
    "mask_not_applied": (
        N_("「带掩码的注意力」的检查没有通过，问题在「用掩码屏蔽」：对照第 5 节，比较你加掩码和不加掩码时得到的权重，看看掩码是否真的改变了分数。"),
        N_("你的掩码没有起作用：结果与不加掩码完全相同，查询仍能访问被屏蔽的位置。常见的原因是调用了 masked_fill 却没有用它的结果：masked_fill 返回一个新张量，不会原地修改分数。"),
        N_('把结果赋回：scores = scores.masked_fill(~allowed, float("-inf"))（或用原地修改的 scores.masked_fill_(~allowed, float("-inf"))）。'),
    ),
    "no_empty_row_error": (
        N_("「整行被屏蔽时报错」的检查没有通过，问题在「空行报错」：重读第 5 节讲填充掩码的那一段，想一想某个查询的整行都不允许访问时，本章的实现约定怎样做。"),
        N_("某个查询整行都被屏蔽时，你的代码没有报错。整行都是 -∞ 时 Softmax 的归一化没有定义，结果是 NaN；本章的实现约定此时抛出 ValueError，而不是等 NaN 出现后再猜。"),
        N_('在屏蔽之前检查每一行：if not allowed.any(dim=-1).all(): raise ValueError("每个查询至少需要一个允许访问的位置")。'),
    ),
    "causal_excludes_diagonal": (
        N_("「因果掩码与填充掩码」的检查没有通过，问题在「因果掩码」：重读第 5 节允许访问的条件，想一想一个位置能不能访问它自己。"),
        N_("你的因果掩码把对角线也屏蔽了。允许访问的条件是 j ≤ i：当前位置的输入属于已知前文（输入与目标已错开一位），可以访问；屏蔽对角线后，第一个位置没有任何可访问的键。"),
        N_("包含对角线的下三角：torch.ones(size, size, dtype=torch.bool).tril()（不要写 diagonal=-1）。"),
    ),
    "causal_upper_triangle": (
        N_("「因果掩码与填充掩码」的检查没有通过，问题在「因果掩码」：重读第 5 节的 M 矩阵，画出 3×3 的掩码，标出行（查询位置 i）和列（键位置 j）。"),
        N_("你的因果掩码是上三角（j ≥ i）：每个位置能看到自己之后的位置，恰好允许了偷看未来。行是查询位置 i、列是键位置 j，应允许 j ≤ i，即下三角。"),
        N_("用下三角：torch.ones(size, size, dtype=torch.bool).tril()，而不是 triu()。"),
    ),
    "padding_on_queries": (
        N_("「因果掩码与填充掩码」的检查没有通过，问题在「填充掩码」：重读第 5 节讲补齐批次长度的一段，想一想要屏蔽的是 PAD 对应的查询还是键。"),
        N_("你的填充掩码屏蔽的是查询而不是键。要屏蔽的是 PAD 对应的键（最后一维），形状应为 (B, 1, 1, T)，以便对所有头和所有查询广播；屏蔽查询会让 PAD 查询整行无键可用。"),
        N_("沿键的一维放长度比较：allowed = torch.arange(size) < torch.as_tensor(lengths)[:, None]，再 return allowed[:, None, None, :]，形状 (B, 1, 1, T)。"),
    ),
    "split_without_transpose": (
        N_("「拆分与合并多头」的检查没有通过，问题在「拆分多头」：重读第 6 节的形状追踪，注意“拆成两个头并调整维度顺序”这一步有两个动作。"),
        N_("你拆头时直接 reshape 成 (B, h, T, d)，没有先拆成 (B, T, h, d) 再交换维度。这样各个头拿到的是按内存顺序切开的片段，混进了别的位置，而不是每个位置特征的一部分；头拆分的是特征，不是序列。"),
        N_("先按特征拆开，再交换维度：x.reshape(batch, length, num_heads, width // num_heads).transpose(1, 2)。"),
    ),
    "merge_without_transpose": (
        N_("「拆分与合并多头」的检查没有通过，问题在「合并多头」：重读第 6 节形状追踪的“把头拼回去”一步，合并必须是拆分的逆操作。"),
        N_("你合并多头时直接 reshape 成 (B, T, h·d)，没有先把维度换回 (B, T, h, d)。这样每个位置拿到的是同一个头里相邻几个位置的结果，而不是各个头在这个位置的结果。"),
        N_("先换回维度顺序，再合并：x.transpose(1, 2).reshape(batch, length, heads * size)。"),
    ),
    "missing_output_projection": (
        N_("「多头注意力」的检查没有通过，问题在「多头注意力的投影」：重读第 6 节多头注意力的公式，把它的每一项和你的 multi_head_attention 的每一步对一对。"),
        N_("你的多头注意力拼接各头之后漏了输出投影 W_O。多头注意力的输出是 Concat(O_1, …, O_h) W_O：投影让各头的结果混合起来，形状追踪的最后一步“输出投影”就是它。"),
        N_("拼接之后乘上 w_o：return merge_heads(heads) @ w_o, weights。"),
    ),
    "causal_true_means_blocked": (
        N_("「因果掩码与填充掩码」的检查没有通过，问题在「因果掩码」：重读第 5 节最后一段，本章的 allowed 中 True 表示什么？"),
        N_("你的 causal_allowed 在未来位置（j > i）为 True、在当前与之前的位置为 False，这是 nn.MultiheadAttention 的约定（True 表示“禁止访问”）。本章的约定相反：True 表示“允许访问”，应在 j ≤ i 处为 True。"),
        N_("返回允许访问的位置：torch.ones(size, size, dtype=torch.bool).tril()。"),
    ),
    "additive_mask_wrong_sign": (
        N_("「带掩码的注意力」的检查没有通过，问题在「用掩码屏蔽」：重读第 5 节加到分数上的矩阵 M，看清被屏蔽的位置最后得到的是什么数。"),
        N_("你用加到分数上的数来屏蔽（第 5 节的 M），但方向反了：被屏蔽的位置最后得到的是一个很大的正数，于是权重几乎全部落在不允许访问的位置上。M 在被屏蔽处是 -∞、在允许处是 0，要加上它：exp(-∞)=0，这些位置才得到零权重。"),
        N_('让被屏蔽的位置最后是 -∞（或 -1e9 这样很大的负数）：scores = scores.masked_fill(~allowed, float("-inf"))，或 scores = scores + M（M 在不允许处为 -∞、允许处为 0）；不要写 scores - M，也不要给被屏蔽的位置加上 +1e9。'),
    ),
    "scale_by_dv": (
        N_("「缩放点积注意力」的检查没有通过，问题在「注意力」的分数缩放上：重读第 3 节，想一想分数是哪两个向量的点积，它的方差随哪个维数增长。"),
        N_("你的代码用值向量的维数 d_v 来缩放分数。分数是查询与键的点积，它的方差随键的维数 d_k 增长，所以要除以 √d_k；d_k = d_v 时两者恰好相同，所以本章的例子看不出区别。"),
        N_("用查询（或键）的最后一维：/ sqrt(query.shape[-1])，而不是 / sqrt(value.shape[-1])。"),
    ),
    "scale_by_fixed_number": (
        N_("「缩放点积注意力」的检查没有通过，问题在「注意力」的分数缩放上：重读第 3 节，再用不同维数的输入试一试你的 scaled_attention。"),
        N_("你的代码总是把分数除以同一个固定的数 √2（本章例子里 d_k = 2），而不是按输入的键维数计算 √d_k。d_k 换成别的值时缩放就错了。"),
        N_("按输入计算：/ sqrt(query.shape[-1])（from math import sqrt）。"),
    ),
    "multi_head_scale_by_model_width": (
        N_("「多头注意力」的检查没有通过，问题在每个头的分数缩放上：重读第 6 节的形状追踪，看清每个头的查询和键有几维，再对照第 3 节。"),
        N_("你的多头注意力把每个头的分数除以 √D（整个模型宽度的平方根）。每个头里的点积只在 D/h 维上求和，所以应除以 √(D/h)，即每个头的维数 d_k 的平方根。"),
        N_("直接调用你的 scaled_attention 处理拆好的头：heads, weights = scaled_attention(query, key, value, allowed)，它用 query.shape[-1]（每个头的维数）缩放。"),
    ),
    "shared_projection": (
        N_("「多头注意力」的检查没有通过，问题在「多头注意力的投影」：重读第 1 节和第 6 节，查询、键和值各由哪个矩阵投影得到？"),
        N_("你的代码用同一个投影矩阵 w_q 算出了 Q、K 和 V，w_k 与 w_v 没有用到。查询、键、值各有自己的投影：Q = X W_Q，K = X W_K（或上下文 W_K），V = X W_V，这样“要找什么”“能提供什么线索”“提供什么内容”才能分开学习。"),
        N_("用各自的矩阵：key = split_heads(source @ w_k, num_heads)，value = split_heads(source @ w_v, num_heads)。"),
    ),
    "multi_head_mask_inverted": (
        N_("「多头注意力」的检查没有通过，问题在掩码的含义上：重读第 5 节最后一段，想一想你的 multi_head_attention 交给 scaled_attention 的掩码，True 表示什么。"),
        N_("你的多头注意力把掩码取反后才交给 scaled_attention，大概是按 nn.MultiheadAttention 的习惯（那里 True 表示不许访问）。本章的 allowed 与 scaled_attention 的约定相同，True 表示允许访问，所以取反后屏蔽的恰好是允许的位置。"),
        N_("直接把 allowed 传下去：scaled_attention(query, key, value, allowed)，不要写 ~allowed。"),
    ),
    "no_divisibility_check": (
        N_("「拆分与合并多头」的检查没有通过，问题在「拆分多头」：重读第 6 节“每头使用 4 维”的例子，想一想模型宽度不能被头数整除时该怎么办。"),
        N_("你拆头前没有检查宽度能否被头数整除。D 不能被 h 整除时每个头分不到相同的维数，reshape 会报出难懂的错误（或悄悄丢掉特征）；本章约定此时明确抛出 ValueError 说明原因。"),
        N_('拆之前检查：if width % num_heads != 0: raise ValueError(f"宽度 {width} 不能被头数 {num_heads} 整除")。'),
    ),
    "scale_by_dim1": (
        N_("「缩放点积注意力」的检查没有通过，问题在「注意力」的分数缩放上：重读第 3 节和第 4 节的形状表，想一想 d_k 是输入张量的哪一维。"),
        N_("你的代码用张量第 1 维的大小来缩放分数。对 (B, h, T, d_k) 的输入这是头数 h，对 (B, T, d_k) 的输入是序列长度 T，都不是键的维数；只有第 1 维恰好等于 d_k 时结果才碰巧正确。"),
        N_("用最后一维：/ sqrt(query.shape[-1])，而不是 query.shape[1] 或 query.size(1)。"),
    ),
    "empty_check_on_keys": (
        N_("「整行被屏蔽时报错」的检查没有通过，问题在「空行报错」：重读第 5 节，想一想“整行被屏蔽”说的是查询的一行还是键的一列，你的检查又沿哪一维看。"),
        N_("你检查空行时沿错了维度：你查的是每个键是否至少有一个查询能访问，而不是每个查询是否至少有一个可访问的键。于是某个查询整行都被屏蔽时没有报错，而填充掩码屏蔽了某个 PAD 键（整列为 False）时却报了错。"),
        N_("沿最后一维检查每一行：if not allowed.any(dim=-1).all(): raise ValueError(…)，而不是 any(dim=-2)。"),
    ),
}
