//! The reader's language: which one a question is in (detected offline), the languages a
//! run may ask for, and the report's own words (title lines, section headings, notes) in the
//! languages the offline writer knows. Quoted sentences stay as their sources wrote them.

use whatlang::Lang;

/// ISO 639-1 codes of the languages a run may ask for, with the detector's name for each.
const CODES: &[(&str, Lang)] = &[
    ("af", Lang::Afr),
    ("ak", Lang::Aka),
    ("am", Lang::Amh),
    ("ar", Lang::Ara),
    ("az", Lang::Aze),
    ("be", Lang::Bel),
    ("bg", Lang::Bul),
    ("bn", Lang::Ben),
    ("ca", Lang::Cat),
    ("cs", Lang::Ces),
    ("cy", Lang::Cym),
    ("da", Lang::Dan),
    ("de", Lang::Deu),
    ("el", Lang::Ell),
    ("en", Lang::Eng),
    ("eo", Lang::Epo),
    ("es", Lang::Spa),
    ("et", Lang::Est),
    ("fa", Lang::Pes),
    ("fi", Lang::Fin),
    ("fr", Lang::Fra),
    ("gu", Lang::Guj),
    ("he", Lang::Heb),
    ("hi", Lang::Hin),
    ("hr", Lang::Hrv),
    ("hu", Lang::Hun),
    ("hy", Lang::Hye),
    ("id", Lang::Ind),
    ("it", Lang::Ita),
    ("ja", Lang::Jpn),
    ("jv", Lang::Jav),
    ("ka", Lang::Kat),
    ("km", Lang::Khm),
    ("kn", Lang::Kan),
    ("ko", Lang::Kor),
    ("la", Lang::Lat),
    ("lt", Lang::Lit),
    ("lv", Lang::Lav),
    ("mk", Lang::Mkd),
    ("ml", Lang::Mal),
    ("mr", Lang::Mar),
    ("my", Lang::Mya),
    ("nb", Lang::Nob),
    ("ne", Lang::Nep),
    ("nl", Lang::Nld),
    ("or", Lang::Ori),
    ("pa", Lang::Pan),
    ("pl", Lang::Pol),
    ("pt", Lang::Por),
    ("ro", Lang::Ron),
    ("ru", Lang::Rus),
    ("si", Lang::Sin),
    ("sk", Lang::Slk),
    ("sl", Lang::Slv),
    ("sn", Lang::Sna),
    ("sr", Lang::Srp),
    ("sv", Lang::Swe),
    ("ta", Lang::Tam),
    ("te", Lang::Tel),
    ("th", Lang::Tha),
    ("tk", Lang::Tuk),
    ("tl", Lang::Tgl),
    ("tr", Lang::Tur),
    ("uk", Lang::Ukr),
    ("ur", Lang::Urd),
    ("uz", Lang::Uzb),
    ("vi", Lang::Vie),
    ("yi", Lang::Yid),
    ("zh", Lang::Cmn),
    ("zu", Lang::Zul),
];

/// The language when nothing says otherwise.
pub const DEFAULT: &str = "en";

/// The English name of language `code` ("de": "German"), for prompts; None for a code no
/// run may ask for.
pub fn name(code: &str) -> Option<&'static str> {
    CODES
        .iter()
        .find(|(c, _)| *c == code)
        .map(|(_, l)| match l {
            Lang::Cmn => "Chinese",
            other => other.eng_name(),
        })
}

/// The codes a run may ask for, for an error message.
pub fn codes() -> impl Iterator<Item = &'static str> {
    CODES.iter().map(|(c, _)| *c)
}

/// Function words that mark a question's language, for the languages the offline writer has
/// words in (and Italian). A short question full of technical terms is too little for trigram statistics
/// ("Was ist Borrowing in Rust?" reads as English to them); its question and function words
/// are not. Words two of these languages share ("in", "en") are left out.
const MARKERS: &[(&str, &[&str])] = &[
    (
        "en",
        &[
            "what", "how", "why", "when", "which", "who", "is", "are", "does", "do", "the", "a",
            "an", "of", "to", "and", "can", "should", "between", "with", "work", "use",
        ],
    ),
    (
        "de",
        &[
            "was",
            "wie",
            "warum",
            "wieso",
            "weshalb",
            "wann",
            "welche",
            "welcher",
            "ist",
            "sind",
            "der",
            "die",
            "das",
            "den",
            "dem",
            "ein",
            "eine",
            "einen",
            "und",
            "oder",
            "funktioniert",
            "mit",
            "von",
            "für",
            "nicht",
            "zwischen",
            "unterschied",
            "kann",
            "man",
            "ich",
            "im",
            "zum",
            "zur",
            "braucht",
            "gibt",
            "es",
        ],
    ),
    (
        "fr",
        &[
            "comment",
            "pourquoi",
            "quand",
            "quel",
            "quelle",
            "quels",
            "est",
            "sont",
            "les",
            "le",
            "la",
            "des",
            "une",
            "un",
            "et",
            "du",
            "au",
            "aux",
            "fonctionne",
            "qu",
            "qu'est-ce",
            "entre",
            "différence",
            "peut",
            "faut",
            "avec",
            "pour",
            "dans",
        ],
    ),
    (
        "es",
        &[
            "cómo",
            "qué",
            "por",
            "porqué",
            "cuándo",
            "cuál",
            "cuáles",
            "es",
            "son",
            "el",
            "los",
            "las",
            "una",
            "y",
            "del",
            "al",
            "funciona",
            "entre",
            "diferencia",
            "puede",
            "con",
            "para",
            "sirve",
        ],
    ),
    // Not a language of the offline writer, but near enough to French and Spanish that its
    // questions would be taken for theirs.
    (
        "it",
        &[
            "come",
            "perché",
            "cosa",
            "quale",
            "quando",
            "funziona",
            "della",
            "delle",
            "dei",
            "degli",
            "il",
            "gli",
            "che",
            "è",
            "sono",
            "tra",
            "differenza",
            "per",
        ],
    ),
];

/// The language `text` (a question) is written in, as a code; English when the text is too
/// short or too mixed to tell. A language written in its own script is told by the script,
/// a long enough text by the detector; a short one in Latin letters by its function words,
/// else by the detector when it is fairly confident.
pub fn detect(text: &str) -> &'static str {
    let Some(info) = whatlang::detect(text) else {
        return DEFAULT;
    };
    let by_detector = CODES
        .iter()
        .find(|(_, l)| *l == info.lang())
        .map(|(c, _)| *c);
    if info.script() != whatlang::Script::Latin || info.is_reliable() {
        return by_detector.unwrap_or(DEFAULT);
    }
    let lower = text.to_lowercase();
    let words: Vec<&str> = lower
        .split(|c: char| !(c.is_alphanumeric() || c == '\'' || c == '-'))
        .filter(|w| !w.is_empty())
        .collect();
    let mut scores: Vec<(&str, usize)> = MARKERS
        .iter()
        .map(|(code, marks)| {
            let hits = words.iter().filter(|w| marks.contains(w)).count();
            (*code, hits)
        })
        .collect();
    scores.sort_by_key(|s| std::cmp::Reverse(s.1));
    match (scores[0], scores[1]) {
        ((code, best), (_, next)) if best > next => code,
        _ if info.confidence() >= 0.5 => by_detector.unwrap_or(DEFAULT),
        _ => DEFAULT,
    }
}

/// What the report says in its own words, in one language.
#[derive(Debug)]
pub struct Words {
    pub code: &'static str,
    pub sources: &'static str,
    pub summary: &'static str,
    pub nothing_covered: &'static str,
    /// `{why}` is replaced by the reason (which stays as the run gave it).
    pub cut_short: &'static str,
    pub answer: &'static str,
    pub details: &'static str,
    pub overview: &'static str,
    /// `{}` is the subject.
    pub overview_of: &'static str,
    /// `{a}` and `{b}` are the subjects compared.
    pub differences: &'static str,
    pub when_to_use_each: &'static str,
    pub definition: &'static str,
    pub how_it_works: &'static str,
    pub rules: &'static str,
    pub examples: &'static str,
    pub pitfalls: &'static str,
    pub background: &'static str,
    pub reasons: &'static str,
    pub tradeoffs: &'static str,
    pub key_concepts: &'static str,
    pub limitations: &'static str,
    /// Marks in the sources list of a report that cites both kinds.
    pub local_file: &'static str,
    pub web_page: &'static str,
}

impl Words {
    pub fn cut_short(&self, why: &str) -> String {
        self.cut_short.replace("{why}", why)
    }

    pub fn overview_of(&self, subject: &str) -> String {
        self.overview_of.replace("{}", subject)
    }

    pub fn differences(&self, a: &str, b: &str) -> String {
        self.differences.replace("{a}", a).replace("{b}", b)
    }
}

const EN: Words = Words {
    code: "en",
    sources: "Sources",
    summary: "Summary",
    nothing_covered: "None of the sources read covered this section.",
    cut_short: "Research was cut short: {why}. This report is written from what was gathered until then.",
    answer: "Answer",
    details: "Details",
    overview: "Overview",
    overview_of: "Overview of {}",
    differences: "Differences between {a} and {b}",
    when_to_use_each: "When to use each",
    definition: "Definition",
    how_it_works: "How it works",
    rules: "Rules and constraints",
    examples: "Examples",
    pitfalls: "Pitfalls and errors",
    background: "Background",
    reasons: "Reasons and motivation",
    tradeoffs: "Trade-offs",
    key_concepts: "Key concepts",
    limitations: "Limitations",
    local_file: "local file",
    web_page: "web page",
};

const DE: Words = Words {
    code: "de",
    sources: "Quellen",
    summary: "Zusammenfassung",
    nothing_covered: "Keine der gelesenen Quellen behandelt diesen Abschnitt.",
    cut_short: "Die Recherche wurde vorzeitig beendet: {why}. Dieser Bericht beruht auf dem, was bis dahin gesammelt wurde.",
    answer: "Antwort",
    details: "Einzelheiten",
    overview: "Überblick",
    overview_of: "Überblick: {}",
    differences: "Unterschiede zwischen {a} und {b}",
    when_to_use_each: "Wann was passt",
    definition: "Definition",
    how_it_works: "Wie es funktioniert",
    rules: "Regeln und Einschränkungen",
    examples: "Beispiele",
    pitfalls: "Fallstricke und Fehler",
    background: "Hintergrund",
    reasons: "Gründe und Motivation",
    tradeoffs: "Abwägungen",
    key_concepts: "Grundbegriffe",
    limitations: "Grenzen",
    local_file: "lokale Datei",
    web_page: "Webseite",
};

const FR: Words = Words {
    code: "fr",
    sources: "Sources",
    summary: "Résumé",
    nothing_covered: "Aucune des sources lues ne traite de cette section.",
    cut_short: "La recherche a été interrompue : {why}. Ce rapport est rédigé à partir de ce qui avait été recueilli jusque-là.",
    answer: "Réponse",
    details: "Détails",
    overview: "Vue d'ensemble",
    overview_of: "Vue d'ensemble : {}",
    differences: "Différences entre {a} et {b}",
    when_to_use_each: "Quand utiliser l'un ou l'autre",
    definition: "Définition",
    how_it_works: "Fonctionnement",
    rules: "Règles et contraintes",
    examples: "Exemples",
    pitfalls: "Pièges et erreurs",
    background: "Contexte",
    reasons: "Raisons et motivations",
    tradeoffs: "Compromis",
    key_concepts: "Notions clés",
    limitations: "Limites",
    local_file: "fichier local",
    web_page: "page web",
};

const ES: Words = Words {
    code: "es",
    sources: "Fuentes",
    summary: "Resumen",
    nothing_covered: "Ninguna de las fuentes leídas trata esta sección.",
    cut_short: "La investigación se interrumpió: {why}. Este informe se basa en lo reunido hasta entonces.",
    answer: "Respuesta",
    details: "Detalles",
    overview: "Panorama general",
    overview_of: "Panorama general: {}",
    differences: "Diferencias entre {a} y {b}",
    when_to_use_each: "Cuándo usar cada uno",
    definition: "Definición",
    how_it_works: "Cómo funciona",
    rules: "Reglas y restricciones",
    examples: "Ejemplos",
    pitfalls: "Errores y trampas comunes",
    background: "Contexto",
    reasons: "Razones y motivación",
    tradeoffs: "Ventajas y desventajas",
    key_concepts: "Conceptos clave",
    limitations: "Limitaciones",
    local_file: "archivo local",
    web_page: "página web",
};

const ZH: Words = Words {
    code: "zh",
    sources: "参考来源",
    summary: "摘要",
    nothing_covered: "所读来源均未涉及本节内容。",
    cut_short: "研究提前结束：{why}。本报告依据此前收集的内容撰写。",
    answer: "回答",
    details: "详细说明",
    overview: "概述",
    overview_of: "{}概述",
    differences: "{a}与{b}的区别",
    when_to_use_each: "各自的适用场景",
    definition: "定义",
    how_it_works: "工作原理",
    rules: "规则与限制",
    examples: "示例",
    pitfalls: "常见陷阱与错误",
    background: "背景",
    reasons: "原因与动机",
    tradeoffs: "权衡",
    key_concepts: "核心概念",
    limitations: "局限",
    local_file: "本地文件",
    web_page: "网页",
};

const ALL: &[&Words] = &[&EN, &DE, &FR, &ES, &ZH];

/// The report's own words in language `code`; English for a language the offline writer has
/// no words in (a model writes any language).
pub fn words(code: &str) -> &'static Words {
    ALL.iter().find(|w| w.code == code).copied().unwrap_or(&EN)
}

/// A section title of the planner's own ("Beispiele") as it is in English ("Examples"), so
/// the writer knows what such a section is for; any other title as it is.
pub fn in_english(title: &str) -> &str {
    for w in ALL.iter().filter(|w| w.code != EN.code) {
        let pairs = [
            (w.answer, EN.answer),
            (w.details, EN.details),
            (w.overview, EN.overview),
            (w.when_to_use_each, EN.when_to_use_each),
            (w.definition, EN.definition),
            (w.how_it_works, EN.how_it_works),
            (w.rules, EN.rules),
            (w.examples, EN.examples),
            (w.pitfalls, EN.pitfalls),
            (w.background, EN.background),
            (w.reasons, EN.reasons),
            (w.tradeoffs, EN.tradeoffs),
            (w.key_concepts, EN.key_concepts),
            (w.limitations, EN.limitations),
            (w.summary, EN.summary),
        ];
        if let Some((_, en)) = pairs.iter().find(|(own, _)| *own == title) {
            return en;
        }
    }
    title
}

/// Whether the offline writer has words in language `code`.
pub fn has_words(code: &str) -> bool {
    ALL.iter().any(|w| w.code == code)
}

/// Whether `heading` is the sources heading in any language the writer has words in.
pub fn is_sources_heading(heading: &str) -> bool {
    let h = heading.trim();
    ALL.iter().any(|w| w.sources.eq_ignore_ascii_case(h))
}

/// What a section says when nothing covered it, in every language (notes, not findings).
pub fn nothing_covered_notes() -> impl Iterator<Item = &'static str> {
    ALL.iter().map(|w| w.nothing_covered)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn questions_are_told_apart_by_language() {
        for (q, code) in [
            ("How does ownership work in Rust?", "en"),
            ("What is a borrow checker?", "en"),
            ("Wie funktioniert die Speicherverwaltung in Rust?", "de"),
            ("Warum ist der Besitz von Werten in Rust wichtig?", "de"),
            (
                "Comment fonctionne la gestion de la mémoire en Rust ?",
                "fr",
            ),
            ("¿Cómo funciona la gestión de memoria en Rust?", "es"),
            ("Rust 中的所有权是如何工作的？", "zh"),
            ("Rust", "en"),
            ("Wie funktioniert Ownership in Rust?", "de"),
            ("Was ist Borrowing in Rust?", "de"),
            ("Warum braucht Rust Lifetimes?", "de"),
            ("What is a trait?", "en"),
            ("What are smart pointers?", "en"),
            ("Rust traits", "en"),
            ("Box vs Rc", "en"),
            ("How do I use async in Rust?", "en"),
            ("Comment fonctionne Ownership en Rust ?", "fr"),
            ("Qu'est-ce qu'un trait ?", "fr"),
            ("¿Cómo funciona Ownership en Rust?", "es"),
            ("¿Qué es un trait?", "es"),
            ("Come funziona la gestione della memoria in Rust?", "it"),
        ] {
            assert_eq!(detect(q), code, "{q}");
        }
    }

    #[test]
    fn codes_and_words() {
        assert_eq!(name("de"), Some("German"));
        assert_eq!(name("zh"), Some("Chinese"));
        assert_eq!(name("xx"), None);
        assert_eq!(words("de").sources, "Quellen");
        assert_eq!(words("nl").sources, "Sources", "no Dutch words: English");
        assert!(has_words("zh") && !has_words("nl"));
        assert_eq!(
            words("fr").differences("A", "B"),
            "Différences entre A et B"
        );
        assert_eq!(in_english("Beispiele"), "Examples");
        assert_eq!(in_english("常见陷阱与错误"), "Pitfalls and errors");
        assert_eq!(in_english("Ownership rules"), "Ownership rules");
        assert_eq!(codes().count(), CODES.len());
        for (c, _) in CODES {
            assert!(name(c).is_some(), "{c}");
        }
    }
}
