//! farflash-bench (being written)
