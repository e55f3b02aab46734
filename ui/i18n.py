"""Labels in English and Simplified Chinese. Static labels follow the browser's language (Gradio's
I18n) until the page's Language switch is used; messages built while answering follow the switch."""

from __future__ import annotations

EN = {
    "chat": "Chat", "monitor": "Monitor", "batch": "Batch",
    "system_prompt": "System prompt", "message": "Message", "message_hint": "Ask anything (Enter to send)",
    "send": "Send", "stop": "Stop", "retry": "Retry", "clear": "Clear", "advanced": "Advanced settings",
    "priority": "Priority", "max_tokens": "Max tokens", "temperature": "Temperature", "top_p": "Top p",
    "reasoning": "Reasoning level", "timeout": "Timeout (s)", "server_wide": "Server-wide (operators)",
    "admin_key": "Admin key", "max_concurrency": "Maximum concurrency (0: the engine's slots)", "queue_size": "Queue size",
    "low_wait": "Low-priority maximum wait (s)", "preset": "Preset", "apply": "Apply limits",
    "apply_preset": "Apply preset", "language": "Language", "prompts": "Prompts, one per line",
    "upload": "Or upload a .txt / .jsonl file", "concurrency": "Concurrency", "run_batch": "Run batch",
    "results": "Results", "download_jsonl": "Download JSONL", "download_csv": "Download CSV",
    "queue_plot": "Queue length · minutes ago", "memory_plot": "Memory in use (GiB) · minutes ago",
    "throughput_plot": "Tokens per second · minutes ago",
    "new_chat": "New chat", "search": "Search", "search_hint": "Titles and messages",
    "conversations": "Conversations", "title": "Title", "rename": "Rename", "delete": "Delete",
    "confirm_delete": "Delete for good", "cancel": "Cancel", "export_format": "Export as",
    "export_one": "Export this", "export_all": "Export all", "export_file": "Exported file", "import": "Import JSON",
    "ask_model": "Ask the model instead",
    "submit_job": "Submit as a batch job (runs on idle capacity)", "jobs": "Your batch jobs (API and page)",
    "job_id": "Batch id", "cancel_job": "Cancel job", "download_output": "Download answers",
    "download_errors": "Download errors", "refresh": "Refresh",
}

ZH = {
    "chat": "对话", "monitor": "监控", "batch": "批量",
    "system_prompt": "系统提示词", "message": "消息", "message_hint": "输入问题（回车发送）",
    "send": "发送", "stop": "停止", "retry": "重试", "clear": "清空", "advanced": "高级设置",
    "priority": "优先级", "max_tokens": "最大生成长度", "temperature": "温度", "top_p": "Top p",
    "reasoning": "推理强度", "timeout": "超时（秒）", "server_wide": "全局设置（管理员）",
    "admin_key": "管理员密钥", "max_concurrency": "最大并发数（0：引擎槽位数）", "queue_size": "队列长度",
    "low_wait": "低优先级最长等待（秒）", "preset": "预设", "apply": "应用限制",
    "apply_preset": "应用预设", "language": "语言", "prompts": "提示词，每行一个",
    "upload": "或上传 .txt / .jsonl 文件", "concurrency": "并发数", "run_batch": "运行批量任务",
    "results": "结果", "download_jsonl": "下载 JSONL", "download_csv": "下载 CSV",
    "queue_plot": "队列长度 · 分钟前", "memory_plot": "内存占用（GiB）· 分钟前", "throughput_plot": "每秒生成 token 数 · 分钟前",
    "new_chat": "新对话", "search": "搜索", "search_hint": "标题和消息内容",
    "conversations": "对话记录", "title": "标题", "rename": "重命名", "delete": "删除",
    "confirm_delete": "确认删除", "cancel": "取消", "export_format": "导出格式",
    "export_one": "导出当前", "export_all": "全部导出", "export_file": "导出的文件", "import": "导入 JSON",
    "ask_model": "改为询问模型",
    "submit_job": "作为批处理任务提交（利用空闲算力）", "jobs": "我的批处理任务（API 与页面）",
    "job_id": "任务 ID", "cancel_job": "取消任务", "download_output": "下载回答",
    "download_errors": "下载错误", "refresh": "刷新",
}

MESSAGES = {
    "en": {
        "queued": "Queued: position {position} of {length}", "eta": ", about {s:.0f} s",
        "busy": "The server is busy: {message} Try again in about {retry} s.",
        "error": "Error: {message}",
        "info": "{caller} · class {priority} · waited {wait:.1f} s · {tokens} tokens · {speed} tok/s · cache {cache}",
        "ready": "ready", "loading": "loading the model…", "signed_in": "signed in as {name}",
        "sign_out": "Sign out", "thinking": "Thinking",
        "yes": "hit", "no": "miss", "similar_hit": "hit, a similar question's answer (similarity {similarity:.2f})",
        "no_gpu": "No GPU here: showing process memory and the engine's KV cache instead.",
        "batch_done": "{n} prompts answered",
        "job_submitted": "Batch job {id} submitted: {n} prompts; it runs while the server has room.",
        "job_state": "Batch job: {state}.",
        "usage": "today {tokens}{quota} tokens · {requests} requests in 24 h · limits: {limits}",
        "no_limits": "none",
        "users_title": "Users, last 24 hours",
        "users_header": "| user | requests | prompt / completion tokens | cache hits | refused | mean wait | tokens today "
                        "| limits |",
        "details": "Details", "not_found": "That conversation is not there (deleted, or not yours).",
        "renamed": "Renamed.", "deleted": "Deleted.", "nothing_to_export": "Nothing to export yet.",
        "exported": "{n} conversation(s) exported.", "history_off": "History is not kept for this page.",
        "import_failed": "Could not import: {problem} Nothing was imported.",
        "imported": "{n} conversation(s) imported.",
        "import_not_json": "the file is not JSON (UTF-8).",
        "import_too_deep": "the file nests too deeply to be a conversations export.",
        "import_unknown_format": "it is neither this page's export nor ChatGPT's conversations.json.",
        "import_bad_file_field": "`{field}` is missing or is not a list.",
        "import_bad_field": "conversation {conversation} in the file: `{field}` is missing or has the wrong type "
                            "or value.",
        "import_too_long": "conversation {conversation} in the file: `{field}` is longer than {limit} characters.",
        "import_unreadable": "conversation {conversation} in the file could not be read.",
        "import_too_many_conversations": "the file holds {n} conversations; at most {limit} are kept per user.",
        "import_too_many_messages": "conversation {conversation} in the file has {n} messages; at most {limit} "
                                    "are kept per conversation.",
        "import_would_drop": "this import would push out {n} of your earlier conversations (at most {limit} are "
                             "kept); delete some first or import fewer.",
        "import_not_uploaded": "that file was not uploaded from this page: upload it again.",
        "import_not_written": "the history could not be written just now.",
        "stopped_reason": "stopped before the end", "outcome_stopped": "stopped", "outcome_refused": "refused",
        "outcome_failed": "failed", "outcome_interrupted": "interrupted", "outcome_streaming": "being written",
    },
    "zh": {
        "queued": "排队中：第 {position} 位，共 {length} 位", "eta": "，约 {s:.0f} 秒",
        "busy": "服务器繁忙：{message} 请约 {retry} 秒后重试。",
        "error": "出错：{message}",
        "info": "{caller} · 优先级 {priority} · 等待 {wait:.1f} 秒 · {tokens} 个 token · {speed} token/秒 · 缓存 {cache}",
        "ready": "就绪", "loading": "正在加载模型…", "signed_in": "已登录：{name}",
        "sign_out": "退出登录", "thinking": "思考过程",
        "yes": "命中", "no": "未命中", "similar_hit": "命中，相似问题的回答（相似度 {similarity:.2f}）",
        "no_gpu": "本机没有 GPU：改为显示进程内存和引擎 KV 缓存占用。",
        "batch_done": "已完成 {n} 个提示词",
        "job_submitted": "已提交批处理任务 {id}：{n} 个提示词，服务器空闲时运行。",
        "job_state": "批处理任务：{state}。",
        "usage": "今日 {tokens}{quota} 个 token · 24 小时内 {requests} 次请求 · 限额：{limits}",
        "no_limits": "无",
        "users_title": "用户（最近 24 小时）",
        "users_header": "| 用户 | 请求数 | 输入 / 输出 token | 缓存命中 | 被拒绝 | 平均等待 | 今日 token | 限额 |",
        "details": "详情", "not_found": "该对话不存在（已删除，或不属于你）。",
        "renamed": "已重命名。", "deleted": "已删除。", "nothing_to_export": "暂无可导出的对话。",
        "exported": "已导出 {n} 个对话。", "history_off": "此页面不保存对话记录。",
        "import_failed": "导入失败：{problem}未导入任何对话。", "imported": "已导入 {n} 个对话。",
        "import_not_json": "文件不是 JSON（UTF-8）。",
        "import_too_deep": "文件嵌套过深，不是对话导出文件。",
        "import_unknown_format": "既不是本页面导出的文件，也不是 ChatGPT 的 conversations.json。",
        "import_bad_file_field": "`{field}` 缺失或不是列表。",
        "import_bad_field": "文件中第 {conversation} 个对话的 `{field}` 缺失，或类型、取值不对。",
        "import_too_long": "文件中第 {conversation} 个对话的 `{field}` 超过 {limit} 个字符。",
        "import_unreadable": "文件中第 {conversation} 个对话无法读取。",
        "import_too_many_conversations": "文件包含 {n} 个对话，每位用户最多保留 {limit} 个。",
        "import_too_many_messages": "文件中第 {conversation} 个对话有 {n} 条消息，每个对话最多保留 {limit} 条。",
        "import_would_drop": "此次导入会挤掉你之前的 {n} 个对话（最多保留 {limit} 个）；请先删除一些，或少导入一些。",
        "import_not_uploaded": "该文件不是从本页面上传的：请重新上传。",
        "import_not_written": "暂时无法写入对话记录。",
        "stopped_reason": "回答未完成即被停止", "outcome_stopped": "已停止", "outcome_refused": "被拒绝",
        "outcome_failed": "失败", "outcome_interrupted": "被中断", "outcome_streaming": "正在写入",
    },
}


def message(lang: str, key: str, **values: object) -> str:
    """A message, or a static label (the Language switch relabels the page with these)."""
    zh = lang.lower().startswith("zh")
    text = MESSAGES["zh" if zh else "en"].get(key) or (ZH if zh else EN)[key]
    return text.format(**values)
